"""Command line: `python -m pipeline …` (pipeline.cli.main)."""
