"""Recipes: the llm-compressor modifier YAML, verbatim, plus the pipeline's own sections.

A recipe file is `recipes/<name>.yaml`, or any path to a .yaml file. Unknown keys are rejected
(pydantic `extra="forbid"`) with the file, the key and its line, so a typo never passes silently.
"""

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.config import schemes
from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION
from pipeline.config.schemes import Scheme, scheme_from_args, schemes_from_args
from pipeline.config.strict import Strict, display, explain, line_of, load_yaml, validated
from pipeline.core.errors import UserError, clip
from pipeline.core.files import is_file
from pipeline.core.paths import RECIPES_DIR

# the eval's backends: transformers in this env, or the serving engine in its own
EvalBackend = Literal["hf", "vllm"]
EVAL_BACKENDS: tuple[str, ...] = get_args(EvalBackend)


class Calibration(Strict):
    """Where calibration text comes from and how much of it (see pipeline/data/texts.py)."""

    dataset: str = Field("python-docs", description="python-docs, a hub data set id, or a file")
    config_name: str | None = Field(None, description="hub data set configuration (subset)")
    split: str = Field("calibration", description="split of the data set to sample from")
    text_column: str = "text"
    chat_template: bool = Field(False, description="render a `messages` column with the template")
    num_samples: int = Field(512, ge=0)
    max_seq_length: int = Field(2048, gt=0)
    seed: int = 42
    pack: bool | None = Field(
        None,
        description="concatenate the texts and cut num_samples samples of exactly "
        "max_seq_length tokens (no padding); default: on for AutoRound, off otherwise",
    )


class Gates(Strict):
    """Pass/fail limits on the held-out split; unset = not checked."""

    max_ppl_ratio: float | None = Field(None, gt=0, description="quantized / original perplexity")
    max_mean_kl: float | None = Field(None, ge=0, description="mean KL(original ‖ quantized)")
    min_same_top_pct: float | None = Field(None, ge=0, le=100, description="same top token, %")


class TaskSpec(Strict):
    """One lm-eval task, run on the original and the quantized model (after llm-compressor's
    lm-eval tests: the quantized model must keep `recovery_threshold` of the original's score)."""

    task: str = Field(description="lm-eval task name; local tasks live in evals/tasks/")
    num_fewshot: int = Field(0, ge=0)
    limit: int | None = Field(None, gt=0, description="first N documents only")
    metric: str = Field("acc", description="lm-eval metric key, e.g. acc, acc_norm, exact_match")
    recovery_threshold: float | None = Field(
        0.95, gt=0, description="min quantized / original score; null = record only"
    )
    max_drop: float | None = Field(
        None,
        gt=0,
        description="non-inferiority margin in the metric's units (0.02 = 2 points of acc): "
        "passes when the paired CI of quantized − original stays above −max_drop; null = off",
    )
    confidence: float = Field(
        0.95, gt=0, lt=1, description="level of the paired CI the max_drop gate reads"
    )


class GenerationSettings(Strict):
    """Greedy answers of both models to the same prompts (pipeline/eval/generation.py): how long
    they are, whether they end, where they part. Reasoning models quantized to 4 bits are seen
    to think longer or never close `</think>`: a longer answer costs what per-token prices hide."""

    enabled: bool = True
    prompts: str = Field(
        "shipped",
        description="shipped (evals/prompts/generation.jsonl) or a .jsonl file: one "
        '{"prompt": …} or {"messages": [...]} per line',
    )
    limit: int | None = Field(None, gt=0, description="first N prompts only")
    max_new_tokens: int = Field(256, gt=0, description="an answer stopped here is truncated")
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto",
        description="render prompts with the tokenizer's chat template: auto = if it has one",
    )
    max_length_ratio: float | None = Field(
        None,
        gt=0,
        description="gate: quantized / original mean answer length; passes when the paired CI's "
        "upper end stays at or under it, fails when its lower end is above; null = record only",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="level of the length ratio's CI")


class EvalSettings(Strict):
    """Quality drift vs the original model (see pipeline/eval/stage.py)."""

    dataset: str = Field("python-docs", description="held-out text: python-docs, file or hub id")
    config_name: str | None = None
    split: str = "heldout"
    text_column: str = "text"
    context_length: int = Field(512, gt=1)
    max_tokens: int = Field(16384, gt=0, description="token budget per split")
    reference_mass: float = Field(
        0.99, gt=0, le=1, description="probability mass of the original kept per token"
    )
    reference_max_k: int = Field(4096, gt=0, description="at most this many tokens per position")
    backend: Literal["auto"] | EvalBackend = "auto"
    kv_cache_dtype: str = Field(
        "auto", description="the quantized model's KV cache in the vllm backend: auto | fp8"
    )
    tasks: list[TaskSpec] = Field(default_factory=list, description="lm-eval tasks (optional)")
    generation: GenerationSettings = GenerationSettings()
    gates: Gates = Gates()


class ServeSettings(Strict):
    """vLLM serving measurement (see pipeline/serve/stage.py); the CLI can override each."""

    input_len: int = Field(128, gt=0, description="random prompt tokens per request")
    output_len: int = Field(64, gt=0, description="generated tokens per request (EOS ignored)")
    concurrency: list[int] = Field([1, 4, 16], min_length=1, description="max concurrency sweep")
    num_prompts: int = Field(32, gt=0, description="requests per level (at least 2 × concurrency)")
    max_model_len: int | None = Field(None, gt=0, description="default: the model's, ≤ 4096")
    tensor_parallel_size: int = Field(1, gt=0)
    expert_parallel: bool = Field(
        False,
        description="MoE: whole experts on each rank (--enable-expert-parallel), for a TP "
        "whose split of the experts straddles the recipe's blocks or groups",
    )
    pipeline_parallel_size: int = Field(
        1, gt=0, description="pipeline stages (one per node beyond the first; Ray's executor)"
    )
    gpu_memory_utilization: float = Field(GPU_MEMORY_UTILIZATION, gt=0, le=1)
    dtype: Literal["auto", "bfloat16", "float16", "half", "float", "float32"] = "auto"
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="auto | fp8 | fp8_e4m3 | fp8_e5m2"
    )
    enforce_eager: bool = Field(False, description="no CUDA graphs / torch.compile (faster start)")
    cpu_kvcache_space_gib: float = Field(1, gt=0, description="CPU only: VLLM_CPU_KVCACHE_SPACE")
    cpu_omp_threads_bind: str | None = Field(
        None,
        description="CPU: VLLM_CPU_OMP_THREADS_BIND (auto, nobind, or cores like 0-31|32-63)",
        pattern=r"^(auto|nobind|\d+(-\d+)?(,\d+(-\d+)?)*(\|\d+(-\d+)?(,\d+(-\d+)?)*)*)$",
    )
    startup_timeout_s: int = Field(
        900, gt=0, description="plus the time to read the checkpoints at 125 MiB/s (server.py)"
    )
    seed: int = 0
    repeats: int = Field(
        2, ge=1, le=10, description="benchmark runs per level and model, interleaved A/B/B/A"
    )
    original: Literal["paired", "cached"] = Field(
        "paired",
        description="paired: the original served beside the artifact and measured alternately "
        "with it; cached: the reference an earlier run kept, at the share and TP a paired run here "
        "gives each side (measured alone first where there is none; refused where only another "
        "placement's was kept)",
    )
    slo_ttft_ms: float = Field(1000, gt=0, description="SLO: time to first token, ms")
    slo_tpot_ms: float = Field(100, gt=0, description="SLO: time per output token, ms")
    slo_attainment: float = Field(
        0.9, gt=0, le=1, description="SLO: share of requests that must meet both targets"
    )


# vLLM's online FP8: FP8 weights (a scale per tensor) and dynamic FP8 activations; what it holds
# in memory is sized as llm-compressor's dynamic FP8
ONLINE_FP8 = schemes.PRESETS["FP8_DYNAMIC"]


class Recipe(Strict):
    description: str
    online: Literal["fp8"] | None = Field(
        None,
        description="vLLM quantizes the original's 16-bit weights as it loads them "
        "(`vllm serve <model> --quantization fp8`): no artifact, no quantization section",
    )
    quantization: dict[str, Any] = Field(
        default_factory=dict, description="llm-compressor recipe (stages → modifiers)"
    )
    calibration: Calibration = Calibration()
    eval: EvalSettings = EvalSettings()
    serve: ServeSettings = ServeSettings()

    @field_validator("quantization")
    @classmethod
    def _stages_and_groups(cls, value: dict) -> dict:
        # llm-compressor silently skips keys not ending in _stage / _modifiers: reject them here.
        for stage, groups in value.items():
            if not stage.endswith("_stage") or not isinstance(groups, dict):
                raise ValueError(f"'{stage}' must be a mapping named <name>_stage")
            for group, mods in groups.items():
                if not group.endswith("_modifiers") or not isinstance(mods, dict) or not mods:
                    raise ValueError(f"'{stage}.{group}' must be a mapping named <name>_modifiers")
        return value

    @model_validator(mode="after")
    def _quantized_one_way(self) -> "Recipe":
        if self.online and self.quantization:
            raise ValueError(
                f"online: {self.online} is vLLM quantizing at load: leave out the quantization "
                "section (llm-compressor has nothing to do)"
            )
        if not self.online and not self.quantization:
            raise ValueError("quantization: needs at least one <name>_stage with modifiers")
        return self


@dataclass(frozen=True)
class RecipeFile:
    name: str
    path: Path
    text: str
    spec: Recipe

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def section_sha256(self, *sections: str) -> str:
        """Hash of some sections only: editing eval gates must not invalidate a quantization."""
        data = self.spec.model_dump(include=set(sections))
        if (data.get("calibration") or {}).get("pack") is None:
            # added after artifacts were cached: unset, it leaves their hashes as they were
            data.get("calibration", {}).pop("pack", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def modifiers(self) -> list[tuple[str, dict]]:
        """(ModifierName, arguments) in order, across all stages."""
        found = []
        for stage in self.spec.quantization.values():
            for group in (stage or {}).values():
                for name, args in (group or {}).items():
                    found.append((name, dict(args or {})))
        return found

    @property
    def online(self) -> str | None:
        return self.spec.online

    def engine_args(self) -> list[str]:
        """What `vllm serve` needs beyond the model: online quantization's flag."""
        return ["--quantization", self.spec.online] if self.spec.online else []

    def scheme(self) -> Scheme | None:
        if self.spec.online == "fp8":
            return ONLINE_FP8
        for _, args in self.modifiers():
            scheme = scheme_from_args(args)
            if scheme:
                return scheme
        return None

    def schemes(self) -> list[tuple[Scheme, list[str]]]:
        """Every weight scheme with its targets (several in a mixed-precision recipe)."""
        if self.spec.online:
            return [(ONLINE_FP8, ["Linear"])]
        for _, args in self.modifiers():
            if found := schemes_from_args(args):
                return found
        return []

    def kv_cache_scheme(self) -> dict | None:
        """llm-compressor's kv_cache_scheme (calibrated KV-cache quantization), if any."""
        for _, args in self.modifiers():
            if args.get("kv_cache_scheme"):
                return dict(args["kv_cache_scheme"])
        return None

    def ignored(self) -> list[str]:
        if self.spec.online:
            return ["lm_head"]  # vLLM's online FP8 quantizes Linear layers, not the LM head
        for _, args in self.modifiers():
            if "ignore" in args:
                value = args["ignore"]
                return [value] if isinstance(value, str) else list(value)
        return []

    def quantization_yaml(self, overrides: dict | None = None) -> str:
        """The modifiers as llm-compressor reads them; `overrides` {Modifier: {arg: value}}."""
        data, overrides = copy.deepcopy(self.spec.quantization), overrides or {}
        for stage in data.values():
            for group in (stage or {}).values():
                for name, args in (group or {}).items():
                    if name in overrides:
                        args.update(overrides[name])
        return yaml.safe_dump(data, sort_keys=False)


def check_modifiers(rf: RecipeFile) -> None:
    """Build the modifiers with llm-compressor's own pydantic models (extra="forbid"), so an
    unknown modifier or argument fails before any weights are loaded. Imports llm-compressor."""
    import os

    if rf.online:
        return  # no modifiers: vLLM quantizes at load

    # Its import-time device warnings are noise for a syntax check; a run re-enables its logs.
    user_set = "LLM_COMPRESSOR_LOG_DISABLED" in os.environ
    os.environ.setdefault("LLM_COMPRESSOR_LOG_DISABLED", "true")
    try:
        from llmcompressor.recipe import Recipe as LCRecipe

        for modifier in LCRecipe.from_dict(rf.spec.quantization).modifiers:
            if hasattr(modifier, "resolve_quantization_config"):
                modifier.resolve_quantization_config()  # scheme vs config_groups conflicts
    except ValidationError as e:
        modifier = _modifier_class(e.title)
        raise UserError(explain(e, modifier, f"{display(rf.path)}: {e.title}", None)) from None
    except Exception as e:  # unknown modifier name, bad ordering
        raise UserError(f"{display(rf.path)}: quantization: {str(e).splitlines()[0]}") from None
    finally:
        if not user_set:
            del os.environ["LLM_COMPRESSOR_LOG_DISABLED"]


def _modifier_class(name: str):
    """llm-compressor's pydantic model of a modifier, to list its valid arguments."""
    from llmcompressor.modifiers.factory import ModifierFactory

    if not ModifierFactory._loaded:
        ModifierFactory.refresh()
    return ModifierFactory._registered_registry.get(name) or ModifierFactory._main_registry.get(
        name
    )


def artifact_recipes() -> list[str]:
    """The shipped recipes that make an artifact (not vLLM's online quantization)."""
    return [name for name in shipped() if not load(name).online]


def shipped() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def resolve_path(name_or_path: str) -> Path:
    if not name_or_path.strip():  # e.g. RECIPE="$UNSET" in a script: never a silent default
        raise UserError(f"no recipe given (empty); valid: {', '.join(shipped())}, or a .yaml")
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        if not is_file(candidate):
            raise UserError(f"recipe file not found: {name_or_path}")
        return candidate
    path = RECIPES_DIR / f"{name_or_path}.yaml"
    if not is_file(path):
        valid = ", ".join(shipped())
        raise UserError(
            f"unknown recipe '{clip(name_or_path)}'; valid: {valid} (or a path to a .yaml)"
        )
    return path


def load(name_or_path: str) -> RecipeFile:
    path = resolve_path(name_or_path)
    data, text = load_yaml(path, "recipe file")
    return parsed(path, data, text)


def parsed(path: Path, data: object, text: str) -> RecipeFile:
    """A recipe from its text, checked as a file's is; named by its path's stem."""
    shown = display(path)
    if not isinstance(data, dict):
        raise UserError(f"{shown}: a recipe must be a mapping with 'description', 'quantization'")
    spec = validated(Recipe, data, shown, text)
    rf = RecipeFile(name=path.stem, path=path, text=text, spec=spec)
    _check_schemes(rf, shown)
    return rf


def _check_schemes(rf: RecipeFile, shown: str) -> None:
    """What the pipeline itself reads from the modifiers (before llm-compressor checks the
    rest): `ignore` / `targets` are names or lists of names; every `scheme:` a compressed-tensors
    preset the pipeline supports. Each refusal names its line."""
    for stage, groups in rf.spec.quantization.items():
        for group, mods in groups.items():
            for name, args in mods.items():

                def refuse(key: str, problem: str, name=name, group=group, stage=stage):
                    line = line_of(rf.text, ("quantization", stage, group, name, key))
                    where = f"{shown}:{line}" if line else shown
                    raise UserError(f"{where}: {name}: {problem}")

                if args is not None and not isinstance(args, dict):
                    refuse("", f"arguments must be a mapping (got {args!r})")
                args = args or {}
                for key in ("ignore", "targets"):
                    value = args.get(key, [])
                    names = [value] if isinstance(value, str) else value
                    if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
                        refuse(
                            key, f"{key} must be a module name or a list of them (got {value!r})"
                        )
                for key in ("kv_cache_scheme", "config_groups"):  # read by the planner too
                    value = args.get(key)
                    if value is not None and not isinstance(value, dict):
                        refuse(key, f"{key} must be a mapping (got {value!r})")
                value = args.get("scheme")
                if value is not None and not isinstance(value, (str, dict)):
                    refuse("scheme", f"scheme must be a preset name (got {value!r})")
                for scheme_name in (
                    list(value) if isinstance(value, dict) else [value] if value else []
                ):
                    if problem := schemes.check_name(scheme_name):
                        refuse("scheme", problem)
