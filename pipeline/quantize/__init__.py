"""Quantize stage: llm-compressor's oneshot on a recipe; its dry-run plan and artifact metrics."""
