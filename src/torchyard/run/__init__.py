"""Runs: an entry's suites in a container (sealed, cleaned up) or in a venv made from its lock."""
