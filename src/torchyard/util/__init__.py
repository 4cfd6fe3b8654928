"""Small shared pieces: the one subprocess seam, atomic files, Markdown tables and GitHub's step summary."""
