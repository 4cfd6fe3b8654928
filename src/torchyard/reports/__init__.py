"""Reports across runs: several entries' parity.json merged into one compatibility table (Markdown, HTML)."""
