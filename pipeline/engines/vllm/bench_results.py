"""What the engine's benchmark measured, typed: its own account of itself (EngineFacts), one
`vllm bench serve` run (Run), a concurrency level's medians (Level). serve/results.py holds them in
serve's results.json."""

from pydantic import BaseModel, ConfigDict, Field


class EngineFacts(BaseModel):
    """What vLLM said about itself (log lines and /metrics); absent where a build is silent."""

    model_config = ConfigDict(extra="allow")
    kv_cache_tokens: int | None = None
    max_concurrency_context: int | None = None
    max_concurrency: float | None = None
    weights_gib: float | None = Field(None, description="GPU workers only")
    checkpoint_gib: float | None = None
    weights_load_seconds: float | None = None
    engine_init_seconds: float | None = None
    available_kv_gib: float | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_memory_bytes: int | None = Field(None, description="CPU engines only")
    num_gpu_blocks: int | None = Field(None, description="GPU engines: the profiled KV pool")
    kv_cache_max_concurrency: float | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    ready_seconds: float | None = None
    memory_after_load_bytes: int | None = Field(
        None, description="the engine processes' proportional set size (PSS) once ready"
    )
    memory_after_bench_bytes: int | None = Field(
        None, description="the same after the last benchmark (peak-ish: pools grow on demand)"
    )


class Metrics(BaseModel):
    """What `vllm bench serve` reports about one run (or the median of several)."""

    completed: int
    failed: int = 0
    duration_s: float
    output_tok_s: float = Field(description="generated tokens per second, all requests")
    total_tok_s: float
    requests_s: float
    goodput_requests_s: float | None = Field(
        None, description="requests per second that met both SLO targets (vllm --goodput)"
    )
    ttft_median_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_median_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_median_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2el_median_ms: float | None = None
    e2el_p99_ms: float | None = None
    kv_cache_usage_peak_pct: float | None = None
    preemptions: float | None = None

    @property
    def slo_attainment(self) -> float | None:
        if self.goodput_requests_s is None or not self.requests_s:
            return None
        return self.goodput_requests_s / self.requests_s


class Run(Metrics):
    """One `vllm bench serve` run at one max concurrency."""

    repeat: int = Field(description="0-based repeat of this level")
    sequence: int = Field(description="position among all the serve run's benchmarks (drift)")


class Level(Metrics):
    """One max concurrency: each metric the median of its repeats, the repeats in `runs`."""

    concurrency: int = Field(description="--max-concurrency of vllm bench serve")
    num_prompts: int = Field(description="requests per run")
    runs: list[Run] = Field(default_factory=list)
