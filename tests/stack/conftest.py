"""The stack suites run inside images (or locally with `nox -s test-cpu -- --local`)."""

pytest_plugins = ["torchyard.inimage.plugin", "pytester"]
