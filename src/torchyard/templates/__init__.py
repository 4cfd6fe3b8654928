"""Files `torchyard init` writes into a project: matrix.toml, noxfile.py, the GitHub workflow."""
