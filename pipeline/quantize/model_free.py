"""The model-free path: llm-compressor's `model_free_ptq`, one safetensors shard at a time.

A data-free recipe (weights only, or dynamic activations: nothing to calibrate) needs no model
in memory: every Linear's weight is quantized from the weight alone. `model_free_ptq` reads a
shard, quantizes its tensors and writes the shard, so memory follows the largest shard instead
of the model (Llama-3-8B's shapes: 2.1 GiB against 13.6 GiB for `oneshot` on CPU), on every GPU
there is, and for architectures transformers does not know yet.

It sees tensors, not modules: every 2-D `weight` that is not a norm and not ignored gets
quantized (3-D fused MoE experts are split per expert first). So the ignore list is derived here
from the architecture, built on the meta device: every module with a 2-D weight that oneshot
would leave alone (embeddings, MoE routers, the recipe's own ignores). The stage then checks the
written artifact against the planner's list of quantized Linears.
"""

import re
import time
from contextlib import contextmanager
from pathlib import Path

from pipeline.config.recipe import RecipeFile
from pipeline.core.checkpoints import Checkpoints
from pipeline.core.errors import UserError
from pipeline.models.architecture import Linear, is_router
from pipeline.planning.geometry import Geometry
from pipeline.planning.weights import matches
from pipeline.quantize import plan
from pipeline.quantize.artifact import tensors

KIND = "shard"
_EXPERT = re.compile(r"\.experts\.\d+\.")
# Mixtral checkpoints name each expert's Linears w1 / w3 / w2; llm-compressor 0.14's oneshot
# writes them as gate_proj / up_proj / down_proj (its save mapping), which vLLM reads too
_ONESHOT_NAMES = {"mixtral": (re.compile(r"(\.experts\.\d+\.)w([123])\."), "gate down up".split())}


def unsupported(recipe: RecipeFile) -> str | None:
    """Why `recipe` cannot take the model-free path (None: it can)."""
    if recipe.online:
        return "an online recipe makes no artifact"
    if plan.needs_calibration(recipe):
        return "it calibrates on data (model-free PTQ cannot calibrate activations)"
    modifiers = recipe.modifiers()
    names = [name for name, _ in modifiers]
    if names != ["QuantizationModifier"]:
        return f"its modifiers ({', '.join(names)}) are not one data-free QuantizationModifier"
    args = modifiers[0][1]
    if not isinstance(args.get("scheme"), str):
        return "it sets config_groups, not one preset scheme"
    extra = sorted(set(args) - {"targets", "ignore", "scheme"})
    if extra:
        return f"it sets {', '.join(extra)}"
    if list(args.get("targets") or ["Linear"]) != ["Linear"]:
        return "its targets are not [Linear]"
    return None


def unsupported_for(recipe: RecipeFile, g: Geometry) -> str | None:
    """Why `recipe` cannot take the model-free path on this model (None: it can)."""
    why = unsupported(recipe)
    if why:
        return why
    scheme = recipe.scheme()
    # NVFP4's global scales are shared by fused partners that model_free_ptq finds by name
    # (q_proj with k_proj and v_proj): an MLA attention has q_proj but no k_proj / v_proj
    # ("Dependency weight … v_proj.weight not found in weight map"); oneshot fuses by module
    if scheme and scheme.global_scales and g.latent_attention:
        return "NVFP4 fuses q/k/v global scales by tensor name and MLA attention has no k/v_proj"
    return None


def derived_ignore(model_path: Path, recipe: RecipeFile) -> list[str]:
    """Checkpoint modules with a 2-D weight that oneshot leaves in 16 bits, by exact name (the
    recipe's own patterns first): found on a meta-device model of the architecture."""

    linears, _ = _meta_modules(model_path)
    ignore = recipe.ignored()
    names = set()
    for name, info in tensors(model_path).items():
        module, _, param = name.rpartition(".")
        if param != "weight" or len(info.shape) != 2 or module.endswith("norm"):
            continue
        if matches(module, ignore) or _is_router(module):
            names.add(module)
        elif not (module in linears or _EXPERT.search(module)):
            # embeddings, other non-Linear 2-D weights, and names this transformers does not
            # know: oneshot sees no Linear there (a Linear, or one expert of a linearized MoE,
            # is quantized by both)
            names.add(module)
    extra = [n for n in sorted(names) if not matches(n, ignore)]
    return [*ignore, *extra]


def _is_router(module: str) -> bool:
    """MoE routers stay 16-bit (llm-compressor ignores them itself; vLLM runs them in 16 bits):
    the planner's rule."""

    return is_router(Linear(module, 0, 0, 0))


def _meta_modules(model_path: Path) -> tuple[set[str], set[str]]:
    """(Linear module names, other modules with a 2-D weight) of the architecture, built on
    the meta device: no weights read, seconds even for 70B."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    linears, others = set(), set()
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear):
            linears.add(name)
        elif isinstance(weight, torch.Tensor) and weight.ndim == 2:
            others.add(name)
    return linears, others


def run(
    model_path: Path,
    out: Path,
    recipe: RecipeFile,
    ignore: list[str],
    workers: int,
    bar,
    checkpoints: Checkpoints | None = None,
) -> dict:
    """Quantize `model_path` into `out` shard by shard; `bar` counts shards; `checkpoints`
    keeps each written shard and gives back those an earlier attempt wrote."""
    import torch
    from llmcompressor import model_free_ptq

    scheme = recipe.scheme()
    if scheme is None:  # unsupported() lets through only recipes of one preset scheme
        raise UserError(f"recipe {recipe.name}: no preset scheme for the model-free path")
    shards = sorted(model_path.glob("*.safetensors"))
    bar.reset(total=len(shards))
    t0 = time.monotonic()
    if checkpoints is not None:
        checkpoints.begin(KIND, len(shards))
    with _counting_shards(bar, checkpoints):
        model_free_ptq(
            str(model_path),
            str(out),
            scheme=scheme.name,
            ignore=ignore,
            max_workers=workers,
            device=None if torch.accelerator.is_available() else "cpu",
            converter=_renamer(model_path),
        )
    return {"shards": len(shards), "quantize_seconds": round(time.monotonic() - t0, 2)}


def kept(checkpoints: Checkpoints) -> tuple[int, int, float]:
    """(shards kept, shards in all, the seconds they took); (0, 0, 0) when none is."""
    done = checkpoints.done() if checkpoints.kind == KIND else {}
    if not done or not checkpoints.total:
        return 0, 0, 0.0
    return len(done), checkpoints.total, sum(unit["seconds"] for unit in done.values())


@contextmanager
def _counting_shards(bar, checkpoints: Checkpoints | None):
    """Tick `bar` as each shard is written (llm-compressor 0.14 calls its module-level
    `_process_shard` once per shard, from worker threads); keep each in `checkpoints`, and
    put back those an earlier attempt kept instead of quantizing them again."""
    from llmcompressor.entrypoints import model_free

    original = model_free._process_shard
    done = checkpoints.done() if checkpoints is not None and checkpoints.kind == KIND else {}

    def counted(*args, **kwargs):
        written = Path(args[1])
        t0 = time.monotonic()
        if written.name in done:  # the same bytes the uninterrupted run writes
            _link(checkpoints.path(written.name), written)
            result = _written(written)
        else:
            result = original(*args, **kwargs)
            if checkpoints is not None:
                seconds = time.monotonic() - t0
                keep = lambda tmp: _link(written, tmp)  # noqa: E731
                checkpoints.keep(written.name, f"shards/{written.name}", keep, seconds)
        size = written.stat().st_size if written.exists() else 0
        bar.set_postfix_str(f"{written.name} {size / 2**30:.2f} GiB", refresh=False)
        bar.update()
        return result

    model_free._process_shard = counted
    try:
        yield
    finally:
        model_free._process_shard = original


def _link(source: Path, target: Path) -> None:
    """A second name for a written shard (no copy); a copy where the file system has none."""
    import os
    import shutil

    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _written(shard: Path) -> tuple[int, dict[str, str]]:
    """What `_process_shard` returns for a shard it wrote: its tensors' bytes and where each
    is, from the safetensors header (nothing loaded)."""
    import json
    import struct

    with open(shard, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    size = sum(end - start for start, end in (t["data_offsets"] for t in header.values()))
    return size, {key: shard.name for key in header}


def _renamer(model_path: Path):
    """A converter giving tensors oneshot's names, chained before the quantizer (None: the
    checkpoint's names are oneshot's already)."""
    import json

    model_type = json.loads((model_path / "config.json").read_text()).get("model_type")
    if model_type not in _ONESHOT_NAMES:
        return None
    pattern, names = _ONESHOT_NAMES[model_type]
    return _Renamer(pattern, names)


class _Renamer:
    """compressed-tensors' Converter protocol: renames only (no dependencies, no config)."""

    def __init__(self, pattern: re.Pattern, names: list[str]):
        self.pattern, self.names = pattern, names

    def _name(self, name: str) -> str:
        return self.pattern.sub(lambda m: f"{m[1]}{self.names[int(m[2]) - 1]}_proj.", name)

    def process(self, tensors: dict) -> dict:
        return {self._name(k): v for k, v in tensors.items()}

    def validate(self, tensors: dict) -> dict:
        return self.process(tensors)

    def get_dependencies(self, weight_name: str) -> set[str]:
        return set()

    def update_config(self, config):
        return config

    def update_model_config(self, model_config: dict) -> dict:
        return model_config
