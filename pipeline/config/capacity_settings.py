"""The capacity planner's numbers (`make plan`): one definition gives the flags, their help and
their range checks."""

from pydantic import Field

from pipeline.config.strict import Strict
from pipeline.config.vllm_defaults import GPU_MEMORY_UTILIZATION, overhead_gib_field


class PlanSettings(Strict):
    users: int = Field(100, gt=0, description="concurrent users")
    context: int = Field(4000, gt=0, description="tokens of context per user")
    gpu_memory_utilization: float = Field(
        GPU_MEMORY_UTILIZATION, gt=0, le=1, description="as given to vllm serve"
    )
    overhead_gib: float | None = overhead_gib_field()
    gpus_per_node: int = Field(
        8, ge=1, le=64, description="tensor parallel within a node, pipeline stages across"
    )
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="as given to vllm serve (None: vLLM's for the GPU)"
    )
