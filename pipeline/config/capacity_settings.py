"""The capacity planner's numbers (`make plan`): one definition gives the flags, their help and
their range checks."""

from pydantic import Field

from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION, overhead_gib_field
from pipeline.config.engine_name import ENGINE, SERVE_COMMAND
from pipeline.config.strict import Strict


class PlanSettings(Strict):
    users: int = Field(100, gt=0, description="concurrent users")
    context: int = Field(4000, gt=0, description="tokens of context per user")
    gpu_memory_utilization: float = Field(
        GPU_MEMORY_UTILIZATION, gt=0, le=1, description=f"as given to {SERVE_COMMAND}"
    )
    overhead_gib: float | None = overhead_gib_field()
    gpus_per_node: int = Field(
        8, ge=1, le=64, description="tensor parallel within a node, pipeline stages across"
    )
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description=f"as given to {SERVE_COMMAND} (None: {ENGINE}'s for the GPU)"
    )
