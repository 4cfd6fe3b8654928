"""Evaluation: each case run on each backend and every output compared with a float64 eager reference; the
backends, metrics, tolerances, training steps, localization of a failure, and the cache of what was evaluated."""
