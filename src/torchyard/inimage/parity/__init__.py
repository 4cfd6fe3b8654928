"""Parity: run a case on each backend and compare every output with a float64 eager reference."""
