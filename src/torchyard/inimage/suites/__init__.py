"""torchyard's stack suites: export, compile, runtime and parity, plus the harness self-tests."""
