"""Evaluation backends: each yields next-token log-probabilities for windows of token ids.

hf    transformers in the main env: the exact reference (float32 on CPU)
vllm  the serving engine's own (pipeline/engines/vllm/eval_backend.py, through pipeline.engines)
"""
