"""What a run's start decides before its tests: the probe, the settings read once, the workers and their devices,
the machine's load, and what may be replayed or left out (whole runs, proven self-tests)."""
