"""Recipes and the quantization schemes they name."""
