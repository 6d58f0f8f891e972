"""Parallel sizes and placement, decided in one place: the tensor-parallel sizes vLLM accepts
for a model (parallel.py), originals as they ship (shipped.py), and where a paired serve's sides
run on the GPUs this process sees (placement.py; the GPUs themselves: core/devices.py)."""
