"""Engine settings that the settings, the plans, the placement and the eval backends share (one
place each, below the engine's room so config and planning can read them): vLLM 0.32's
defaults, or ours where we choose otherwise (said so beside it)."""

from pydantic import Field

from pipeline.config.engine_name import ENGINE

# --gpu-memory-utilization: the share of each GPU's memory an engine takes at start-up. Our choice,
# not vLLM's default (0.92 in 0.32, config/cache.py). vLLM refuses to start unless that share of
# the GPU is still free (v1/worker/utils.py: request_memory); 0.9 leaves room for what may already
# hold some of it: another process's CUDA context, e.g. a stage or engine started before this one.
GPU_MEMORY_UTILIZATION = 0.9

# Windows per forward when the eval scores (the vllm backend's batch, the hf backend's
# batch_size): ours; it bounds a batch's logits, log-probs and ranks, and sets scoring's steps.
BATCH_WINDOWS = 4


def overhead_gib_field():
    """--overhead-gib, for `make plan` and `make advise` alike: None keeps the engine's rule."""
    own = f"{ENGINE}'s own rule: its profile's activation peak, CUDA graphs, non-torch memory"
    said = f"a flat allowance per GPU beside weights and KV (None: {own})"
    return Field(None, ge=0, le=2**20, description=said)
