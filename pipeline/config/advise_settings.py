"""`make advise`'s numbers: one definition gives the flags, their help and their range checks."""

from pydantic import Field

from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION, overhead_gib_field
from pipeline.config.engine_name import SERVE_COMMAND
from pipeline.config.strict import Strict


class AdviseSettings(Strict):
    users: int = Field(100, gt=0, description="concurrent users")
    context: int = Field(4000, gt=0, description="tokens of context per user")
    slo_ttft_ms: float | None = Field(None, gt=0, description="time to first token at most")
    slo_itl_ms: float | None = Field(None, gt=0, description="inter-token latency at most")
    max_kl: float | None = Field(None, ge=0, description="mean KL vs the original at most")
    gpu_hour_usd: float | None = Field(
        None, gt=0, description="price of one GPU-hour (default: pipeline/perf/prices.toml)"
    )
    host_hour_usd: float | None = Field(None, gt=0, description="price of this host's hour")
    gpu_memory_utilization: float = Field(
        GPU_MEMORY_UTILIZATION, gt=0, le=1, description=f"as given to {SERVE_COMMAND}"
    )
    overhead_gib: float | None = overhead_gib_field()
