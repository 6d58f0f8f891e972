"""Eval stage: perplexity, KL and top-token drift against the original, and lm-eval tasks."""
