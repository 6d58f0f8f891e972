"""Devices and parallel sizes, decided in one place: the GPUs this process may use
(devices.py) and the tensor-parallel sizes vLLM accepts for a model (parallel.py)."""
