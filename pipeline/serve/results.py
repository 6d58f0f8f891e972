"""serve/<fingerprint>/results.json, typed (`python -m pipeline schema serve`)."""

from pathlib import Path

from pydantic import BaseModel, Field

from pipeline.config.recipe import ServeSettings
from pipeline.engines import bench_results

SCHEMA_VERSION = 3
# what the engine's benchmark measured: its schema is the engine's (engines/vllm/bench_results.py)
EngineFacts = bench_results.EngineFacts
Metrics = bench_results.Metrics
Run = bench_results.Run
Level = bench_results.Level


class SidePlacement(BaseModel):
    """Where one side ran (pipeline/engines/vllm/placement.py)."""

    gpus: list[int] = Field(description="the host's GPU indices (nvidia-smi's numbering)")
    gpu_uuids: list[str] = Field(default_factory=list)
    tensor_parallel_size: int
    gpu_memory_utilization: float | None = Field(None, description="its share of each GPU")


class Placement(BaseModel):
    mode: str = Field(
        description="cpu | side-by-side | shared | sequential | alone (the cached original)"
    )
    reason: str


class Measurement(BaseModel):
    """One model served: engine facts, the OpenAI smoke check, the benchmark levels."""

    model_dir: str = Field(description="local path (left out when published)")
    served_name: str
    complete: bool
    max_model_len: int = Field(description="context the engine was started with")
    checkpoint_bytes: int = Field(description="bytes of the safetensors tensors")
    gpus: int | None = Field(
        None, description="GPUs the engine ran on (tensor parallel); CPU: none"
    )
    placement: SidePlacement | None = Field(None, description="its GPUs; CPU: none")
    engine: EngineFacts = EngineFacts()
    smoke: dict = Field(default_factory=dict)
    levels: list[Level] = Field(default_factory=list)


class Pair(BaseModel):
    original: float | None = Field(description="median of the repeats")
    quantized: float | None = Field(description="median of the repeats")
    ratio: float | None = Field(
        description="quantized / original: the median of the repeats' paired ratios"
    )
    spread: tuple[float, float] | None = Field(
        None, description="lowest and highest paired ratio of the repeats"
    )
    ratio_se: float | None = Field(
        None, description="standard error of the paired ratios' mean (from ≥ 2 repeats)"
    )
    note: str | None = Field(None, description="why there is no ratio (e.g. a resolution floor)")


class MemoryComparison(BaseModel):
    checkpoint_bytes: Pair
    weights_gib: Pair
    kv_cache_tokens: Pair
    max_concurrency: Pair
    engine_bytes_after_load: Pair = Field(description="the engine processes' PSS, once ready")
    engine_bytes_after_bench: Pair = Field(description="the same after the benchmarks")


class LevelComparison(BaseModel):
    concurrency: int
    output_tok_s: Pair
    output_tok_s_per_gpu: Pair | None = Field(
        None, description="output tokens/s per GPU of each side (GPU hosts only)"
    )
    ttft_median_ms: Pair
    ttft_p99_ms: Pair
    itl_median_ms: Pair
    itl_p99_ms: Pair
    tpot_median_ms: Pair
    e2el_median_ms: Pair
    e2el_p99_ms: Pair


class Comparison(BaseModel):
    paired: bool = Field(
        description="both models served side by side and benchmarked alternately (A/B/B/A); "
        "false: against the cached original, measured at another time"
    )
    repeats: int = Field(description="benchmark runs per level and model")
    memory: MemoryComparison
    levels: list[LevelComparison]


class SloSide(BaseModel):
    """One model against the SLO over the concurrency levels tested."""

    capacity: int | None = Field(
        description="highest concurrency tested whose median attainment met the SLO (None: none)"
    )
    capacity_is_lower_bound: bool = Field(
        description="the highest level tested met it: the real capacity may be higher"
    )
    goodput_requests_s: float | None = Field(description="goodput at that concurrency")
    attainment: dict[int, float | None] = Field(description="concurrency → share of good requests")
    memory_bound_concurrency: int | None = Field(
        description="requests of input_len + output_len tokens the KV pool holds at once "
        "(the planner's figure from the config; the engine's where it has none)"
    )
    limited_by: str | None = Field(
        description="latency: the SLO binds below the memory bound; memory: the reverse"
    )


class Slo(BaseModel):
    ttft_ms: float
    tpot_ms: float
    attainment: float = Field(description="share of requests that must meet both targets")
    original: SloSide
    quantized: SloSide


class Predicted(BaseModel):
    """The capacity planner's figures from the config alone, beside the measured ones."""

    weights_bytes: int
    weights_measured: int
    kv_cache_tokens: int | None
    kv_cache_tokens_measured: int | None


class CostLevel(BaseModel):
    concurrency: int
    usd_per_million_output_tokens: Pair = Field(
        description="price × GPUs (or hosts) / measured output tokens/s; ratio: quantized / "
        "original, paired per repeat where the sides were benchmarked alternately"
    )


class Cost(BaseModel):
    """What the measured throughput costs at the price of the hardware it ran on."""

    hardware: str = Field(description="the GPU type (pipeline/planning/gpus.py) or 'CPU host'")
    usd_per_hour: float = Field(description="one GPU, or the host")
    price_source: str = Field(description="the prices table's provider and date, or the user")
    units: dict[str, int] = Field(description="GPUs (or hosts) each side ran on")
    levels: list[CostLevel]
    at_slo_capacity: Pair = Field(
        description="each side at its own SLO capacity (a ratio of medians; None: no capacity)"
    )


class BoundLevel(BaseModel):
    concurrency: int
    decode_step_bound_ms: float = Field(
        description="roofline: the least time a decode step of this many sequences can take"
    )
    bound_by: str = Field(description="memory or compute, at the bound")
    tpot_median_ms: float | None = Field(description="measured time per output token")
    measured_over_bound: float | None = Field(
        description="measured decode tokens/s ÷ the bound's (= bound step / measured TPOT): "
        "how close the engine came; ≤ 1 unless the bound is wrong"
    )


class BoundCheck(BaseModel):
    """Each side's measured decode rate against the roofline bound of the hardware it ran on
    (pipeline/perf/bound.py; on a CPU host its measured bandwidth and matmul rate)."""

    hardware: str
    hardware_source: str
    context: int = Field(description="cached tokens per sequence at the bound: input + output / 2")
    original: list[BoundLevel]
    quantized: list[BoundLevel]


class ServeResults(BaseModel):
    schema_version: int = Field(SCHEMA_VERSION, description="bumped when fields change meaning")
    model: str
    recipe: str
    settings: ServeSettings = Field(description="the recipe's serve settings with overrides")
    quantized: Measurement
    original: Measurement = Field(description="the original, served the same way (16-bit KV)")
    original_cached: bool = Field(description="the original's measurement came from the cache")
    placement: Placement | None = Field(
        None, description="how the two sides shared the host (sequential: ratios unpaired)"
    )
    comparison: Comparison = Field(description="quantized / original, memory and per level")
    slo: Slo = Field(description="SLO capacity and goodput of both models")
    predicted: dict[str, Predicted] = Field(description="original and quantized")
    cost: Cost | None = Field(None, description="$ per 1M output tokens (None: no price known)")
    bound: BoundCheck | None = Field(None, description="measured decode vs the roofline bound")
    complete: bool = Field(description="false only in a failed run's <fingerprint>.incomplete/")


def load(path: Path) -> ServeResults:
    return ServeResults.model_validate_json(Path(path).read_text())
