"""Scripts run by the serving env's python (vLLM), never imported by the main env."""
