"""vLLM 0.32's defaults that the settings, the plans and the placement share (one place each)."""

# --gpu-memory-utilization: the share of each GPU's memory an engine takes at start-up
GPU_MEMORY_UTILIZATION = 0.9
