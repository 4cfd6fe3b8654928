"""One module per CLI command: each parses nothing, calls the core, and returns an exit status or raises."""
