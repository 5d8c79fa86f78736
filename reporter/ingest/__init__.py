"""Ingest: readers for what people already have (key_averages tables, Chrome traces).
Produces Profiles."""
