"""The in-image side: runs inside each image with torch, pytest and what the entry installs.

Nothing here imports the host side (`torchyard.matrix`, `torchyard.lock`, ...); the only shared module is
the stdlib-only `torchyard.markdown`.
"""
