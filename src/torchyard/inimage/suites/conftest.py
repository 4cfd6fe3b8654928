"""The stack suites run inside images (or in a venv with `torchyard test --local`); the plugin comes in
with `-p torchyard.inimage.plugin` on the command line (`torchyard.contract.pytest_args`)."""

pytest_plugins = ["pytester"]
