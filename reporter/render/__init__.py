"""Render: the language table, view models (Babel), Markdown, PDF and charts. Reads what
analyze made; never parses text back."""
