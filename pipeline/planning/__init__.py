"""Parallel sizes and memory, decided in one place: a model's geometry read once from its config
(geometry.py: the only planner that reads a config; originals as they ship, every Linear as
vLLM splits it — linears.py), the tensor-parallel sizes vLLM accepts for it (parallel.py), the
layouts its quantization loads at (layout.py), the GPU table and the inventory a plan may take
(gpus.py), the KV cache's bytes (kv_cache.py), an engine's memory beside them
(engine_memory.py), the deployment — TP × PP, executor, users held — (deployment.py). The
engine's rules live here, below its room, because quantize and `make plan` read them too; the
engines eval and serve start, and where a paired serve's sides run, are the room's
(pipeline/engines/vllm/: sizing.py, engine_plan.py, placement.py)."""
