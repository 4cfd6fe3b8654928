"""Reports across runs: several entries' parity.json merged into one compatibility table, and their ops sweeps
into one op table (Markdown, HTML)."""
