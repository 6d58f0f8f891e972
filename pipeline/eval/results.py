"""eval/<fingerprint>/results.json, typed (`python -m pipeline schema eval`). No torch: publish,
nightly and the CLI read results without it."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config.engine_name import BACKEND
from pipeline.eval.gates import GateReport, check_gates

SCHEMA_VERSION = 1


class ReferenceInfo(BaseModel):
    key: str = Field(description="the cached reference's key (model, tokens, mass, backend)")
    tokens_kept_mean: float
    tokens_kept_max: int
    mass_kept_mean: float
    mass_kept_min: float


class DriftFloor(BaseModel):
    """The original against its own reference at another batch size (pipeline/eval/floor.py):
    the drift the measurement shows when nothing is quantized."""

    batch_size: int = Field(description="windows per batch of the second pass (reference: 4)")
    tokens: int
    kl_mean: float
    kl_mean_se: float
    kl_p99: float
    same_top_pct: float
    ppl_ratio: float
    rms_dp_pct: float
    cached: bool = Field(False, description="came from the cache beside the reference")


class SplitDrift(BaseModel):
    """One split: the original vs the quantized model on the same token windows."""

    model_config = ConfigDict(populate_by_name=True)
    tokens: int = Field(description="scored tokens")
    ppl_original: float
    ppl_original_se: float
    ppl_quantized: float
    ppl_quantized_se: float
    ppl_ratio: float
    ppl_ratio_se: float = Field(description="paired: SE of exp(mean(nll_q − nll_p))")
    ppl_diff: float
    kl_mean: float = Field(description="mean KL(original ‖ quantized), nats per token")
    kl_mean_se: float
    kl_p50: float
    kl_p90: float
    kl_p99: float
    kl_p99_9: float
    kl_max: float
    same_top_pct: float = Field(description="% of tokens whose most likely token is the same")
    same_top_pct_se: float
    # None: an eval made before top-5 agreement was measured
    top5_pct: float | None = Field(
        None,
        description="% of tokens whose original top-1 token is "
        "among the quantized model's 5 most likely",
    )
    top5_pct_se: float | None = None
    rms_dp_pct: float = Field(description="RMS of Δp of the actual next token, %")
    windows: int
    context_length: int
    reference_bytes_per_token: float
    reference: ReferenceInfo
    reference_cached: bool = Field(description="the original's reference came from the cache")
    floor: DriftFloor | None = Field(None, description="heldout: the measurement's noise floor")


class PairedTask(BaseModel):
    """One task's two runs paired item by item (pipeline/eval/paired_tasks.py)."""

    items: int = Field(description="items scored by both")
    change: float = Field(description="mean paired difference, second − first run")
    change_low: float = Field(description="bootstrap CI's lower end (percentile, seeded)")
    change_high: float
    confidence: float
    binary: bool = Field(description="every item 0 or 1: flips and McNemar apply")
    right_to_wrong: int | None = None
    wrong_to_right: int | None = None
    mcnemar_p: float | None = Field(None, description="exact: binomial test of the flips vs ½")

    @property
    def flips(self) -> int | None:
        if self.right_to_wrong is None or self.wrong_to_right is None:  # set together
            return None
        return self.right_to_wrong + self.wrong_to_right


class TaskRow(BaseModel):
    task: str
    metric: str
    num_fewshot: int
    samples: int | None
    original: float
    original_stderr: float | None
    quantized: float
    quantized_stderr: float | None
    recovery: float | None = Field(description="quantized / original")
    recovery_threshold: float | None
    original_cached: bool = False
    paired: PairedTask | None = Field(None, description="quantized vs original, item by item")
    floor: PairedTask | None = Field(
        None, description="noise floor: the original vs itself at another lm-eval batch size"
    )
    floor_cached: bool = False
    original_dtype: str | None = Field(None, description="what lm-eval scored the original in")
    quantized_dtype: str | None = Field(
        None,
        description="what lm-eval scored the quantized model in; hf: the drift's own model "
        "object, so the eval's dtype",
    )


class GenerationComparison(BaseModel):
    """Two runs' greedy answers to the same prompts, prompt by prompt
    (pipeline/eval/generation.py): "original" is the first run, "quantized" the second."""

    prompts: int
    max_new_tokens: int
    batch_size: int = Field(description="prompts per generate call")
    mean_tokens_original: float = Field(description="tokens per answer, EOS not counted")
    mean_tokens_quantized: float
    length_ratio: float | None = Field(description="mean length, second / first")
    length_ratio_low: float | None = Field(description="paired bootstrap CI (percentile, seeded)")
    length_ratio_high: float | None
    confidence: float
    eos_rate_original: float = Field(description="share of answers that ended with EOS")
    eos_rate_quantized: float
    truncated_rate_original: float = Field(description="share stopped at max_new_tokens")
    truncated_rate_quantized: float
    identical: int = Field(description="answers token-for-token the same")
    first_divergence_median: float | None = Field(
        None, description="of the answers that differ: the first differing token's index"
    )
    first_divergence_min: int | None = None
    think_end_rate_original: float | None = Field(
        None, description="share of answers with the tokenizer's </think>; null: it has none"
    )
    think_end_rate_quantized: float | None = None


class GenerationDrift(GenerationComparison):
    """The quantized model's answers against the original's, with the noise floor: the
    original against itself at another batch size."""

    floor: GenerationComparison
    original_cached: bool = Field(False, description="the original's answers came from the cache")


class EvalResults(BaseModel):
    schema_version: int = Field(SCHEMA_VERSION, description="bumped when fields change meaning")
    model: str = Field(description="the model's run-dir name (alias, org--name or folder)")
    recipe: str
    backend: str = Field(description=f"hf (transformers) or {BACKEND}")
    dtype: str = Field(description="what the quantized model ran in")
    kv_cache: str = Field(description="16-bit, or how an FP8 KV cache was applied")
    engine: dict | None = Field(
        None,
        description=f"{BACKEND} backend: the quantized model's engine (tensor_parallel_size, "
        "gpu_memory_utilization, max_num_seqs, enforce_eager, reason), sized by the planner",
    )
    reference_mass: float = Field(description="probability mass of the original kept per token")
    splits: dict[str, SplitDrift] = Field(description="heldout and calibration")
    tasks: list[TaskRow] = Field(default_factory=list)
    generation: GenerationDrift | None = Field(None, description="greedy answers compared")
    gates: GateReport = Field(description="as checked when evaluated; readers re-check")
    settings: dict = Field(default_factory=dict, description="the eval settings used")

    @property
    def heldout(self) -> SplitDrift:
        return self.splits["heldout"]


def load(path: Path, settings=None) -> EvalResults:
    """Results as saved; with the recipe's eval settings, the gates re-checked against them as
    they are now (editing a gate needs no re-evaluation)."""
    results = EvalResults.model_validate_json(Path(path).read_text())
    if settings is not None:
        task_rows = [t.model_dump() for t in results.tasks]
        generation = results.generation.model_dump() if results.generation else None
        results.gates = check_gates(settings, results.heldout.model_dump(), task_rows, generation)
    return results
