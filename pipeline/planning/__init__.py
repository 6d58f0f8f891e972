"""Parallel sizes and placement, decided in one place: a model's geometry read once from its
config (geometry.py: the only planner that reads a config; originals as they ship, every Linear
as vLLM splits it — linears.py), the tensor-parallel sizes vLLM accepts for it (parallel.py),
the layouts its quantization loads at (layout.py), the GPU table and the inventory a plan may
take (gpus.py), the KV cache's bytes (kv_cache.py), the deployment — TP × PP, executor, users
held — (deployment.py), the engines eval and serve start on this host (engines.py), and where a
paired serve's sides run on the GPUs this process sees (placement.py; the GPUs themselves:
core/devices.py)."""
