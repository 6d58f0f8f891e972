"""Serve stage: vLLM memory and throughput of the artifact beside the original's."""
