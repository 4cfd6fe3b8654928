"""The host: the Docker engine and the client that builds, and what the host offers containers."""
