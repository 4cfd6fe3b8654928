"""The suites a user reads (export, compile, runtime, parity, train, aot, ops): each states the rule and bound that
decide its verdict. The harness's self-tests are in `selftests/`."""
