"""serve/<fingerprint>/results.json, typed (`python -m pipeline schema serve`)."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config.recipe import ServeSettings

SCHEMA_VERSION = 1


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
    kv_cache_memory_bytes: int | None = None
    kv_cache_max_concurrency: float | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    ready_seconds: float | None = None


class Level(BaseModel):
    """One `vllm bench serve` run at one max concurrency."""

    concurrency: int = Field(description="--max-concurrency of vllm bench serve")
    num_prompts: int
    completed: int
    failed: int = 0
    duration_s: float
    output_tok_s: float = Field(description="generated tokens per second, all requests")
    total_tok_s: float
    requests_s: float
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


class Measurement(BaseModel):
    """One model served: engine facts, the OpenAI smoke check, the benchmark levels."""

    model_dir: str = Field(description="local path (left out when published)")
    served_name: str
    complete: bool
    max_model_len: int = Field(description="context the engine was started with")
    checkpoint_bytes: int = Field(description="bytes of the safetensors tensors")
    engine: EngineFacts = EngineFacts()
    smoke: dict = Field(default_factory=dict)
    levels: list[Level] = Field(default_factory=list)


class Pair(BaseModel):
    original: float | None
    quantized: float | None
    ratio: float | None = Field(description="quantized / original")
    note: str | None = Field(None, description="why there is no ratio (e.g. a resolution floor)")


class MemoryComparison(BaseModel):
    checkpoint_bytes: Pair
    weights_gib: Pair
    kv_cache_tokens: Pair
    max_concurrency: Pair


class LevelComparison(BaseModel):
    concurrency: int
    output_tok_s: Pair
    ttft_median_ms: Pair
    ttft_p99_ms: Pair
    itl_median_ms: Pair
    itl_p99_ms: Pair
    tpot_median_ms: Pair


class Comparison(BaseModel):
    memory: MemoryComparison
    levels: list[LevelComparison]


class Predicted(BaseModel):
    """The capacity planner's figures from the config alone, beside the measured ones."""

    weights_bytes: int
    weights_measured: int
    kv_cache_tokens: int | None
    kv_cache_tokens_measured: int | None


class ServeResults(BaseModel):
    schema_version: int = Field(SCHEMA_VERSION, description="bumped when fields change meaning")
    model: str
    recipe: str
    settings: ServeSettings = Field(description="the recipe's serve settings with overrides")
    quantized: Measurement
    original: Measurement = Field(description="the original, served the same way (16-bit KV)")
    original_cached: bool = Field(description="the original's measurement came from the cache")
    comparison: Comparison = Field(description="quantized / original, memory and per level")
    predicted: dict[str, Predicted] = Field(description="original and quantized")
    complete: bool = Field(description="false only in a failed run's <fingerprint>.incomplete/")


def load(path: Path) -> ServeResults:
    return ServeResults.model_validate_json(Path(path).read_text())
