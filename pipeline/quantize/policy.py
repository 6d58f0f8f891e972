"""How a recipe's quantize runs here, decided from its request before anything loads: the
calibration (the recipe's, the command line's overrides, tiny-llama's caps, the pack default),
the path (model-free or oneshot), the processes (--nproc, or one per visible GPU where the
calibration splits), and tiny-llama's cap on AutoRound's iterations.
Every refusal is one line naming the flag or recipe key and what would do."""

import os
from dataclasses import dataclass

from pipeline.config import recipe
from pipeline.config.engine_name import ENGINE
from pipeline.config.strict import validated
from pipeline.core import environment
from pipeline.core.errors import UserError
from pipeline.data.texts import check_source
from pipeline.planning import shm
from pipeline.planning.geometry import Geometry
from pipeline.quantize import model_free, plan
from pipeline.quantize.request import QuantizeRequest

PATHS = ("model-free", "oneshot")
# tiny-llama is a CPU test model: recipes' production calibration budgets (512 × 2048) are
# capped to this unless given explicitly on the command line.
TINY_CALIBRATION_CAP = {"num_samples": 64, "max_seq_length": 256}
# and AutoRound's tuning (~14 s per layer per 200 iterations on 2 CPU cores) to this many
# iterations (measured: mean KL 5.4e-5 at 50, 3.2e-5 at 200, round-to-nearest 2.0e-4)
TINY_AUTOROUND_ITERS = 50


@dataclass(frozen=True)
class Decided:
    """What the policy decided for one request."""

    calibration: recipe.Calibration
    path: str  # "model-free" or "oneshot"
    capped: dict  # tiny-llama's caps on modifier arguments ({} elsewhere)
    nproc: int = 1  # processes under torchrun
    processes: str | None = None  # why that many, where the policy chose (None: asked, or 1 of 1)


def decide(req: QuantizeRequest, g: Geometry) -> Decided:
    """The calibration, the path and the caps, each checked (in that order)."""
    cal = calibration(req)
    if req.nproc is not None:
        check_nproc(req.nproc, req.recipe, cal)
    path = choose_path(req.path, req.recipe, req.workers, g)
    nproc, why = (req.nproc, None) if req.nproc is not None else processes(req.recipe, cal, path, g)
    return Decided(cal, path, capped(req), nproc, why)


def processes(
    rf: recipe.RecipeFile, cal: recipe.Calibration, path: str, g: Geometry
) -> tuple[int, str | None]:
    """--nproc left out: one process per visible GPU where llm-compressor splits the work —
    each rank calibrates its share of the samples and solves its share of each layer's modules
    (GPTQ's Hessians reduced to the rank that owns the module, AWQ's and the observers'
    statistics all-reduced) — so a layer takes ~1/N of one GPU's time; else one, and why."""
    gpus = environment.gpus()
    if path != "oneshot" or rf.online or cal.num_samples == 0:
        return 1, None  # nothing to split: no calibration pass
    if len(gpus) < 2:  # on a CPU, processes would split its cores: --nproc N asks for them
        return 1, None
    n = min(len(gpus), cal.num_samples)
    what = f"{n} processes (compressed-tensors' shared offload)"
    why = shm.refusal(g.original_bytes, what) or shm.mappings_refusal(shm.shared_tensors(g), what)
    if why:
        return 1, f"1 process, not {n}: {why}"
    return n, f"{n} processes, one per visible GPU: each calibrates 1/{n} of the samples"


def calibration(req: QuantizeRequest) -> recipe.Calibration:
    """The recipe's calibration with tiny-llama's caps, then the command line's values, then
    the pack default; checked by the recipe's own ranges, and against what the recipe needs."""
    rf = req.recipe
    cal = rf.spec.calibration
    updates = {}
    if req.ref.source == "tiny":
        updates = {k: min(getattr(cal, k), cap) for k, cap in TINY_CALIBRATION_CAP.items()}
    if req.num_samples is not None:
        updates["num_samples"] = req.num_samples
    if req.max_seq_length is not None:
        updates["max_seq_length"] = req.max_seq_length
    if cal.pack is None:
        # llm-compressor 0.14 pads AutoRound's captured layer inputs to a common length and
        # the padding reaches its tuning loss: on tiny-llama, variable-length samples made
        # AutoRound drift 11x more than round-to-nearest (mean KL 2.3e-3 vs 2.1e-4), packed
        # equal-length ones (AutoRound's own convention) 6x less (3.2e-5)
        updates["pack"] = any(name == "AutoRoundModifier" for name, _ in rf.modifiers())
    # the recipe's own ranges check the command line's values (one definition)
    cal = validated(recipe.Calibration, {**cal.model_dump(), **updates}, "calibration")
    if cal.num_samples == 0 and plan.needs_calibration(rf):
        raise UserError(
            f"recipe {rf.name} needs calibration data (its modifiers observe activations or "
            "the KV cache); set calibration.num_samples > 0 or --num-samples"
        )
    if cal.num_samples > 0:
        column = "messages" if cal.chat_template else cal.text_column
        check_source(cal.dataset, cal.split, column, "calibration")
    return cal


def capped(req: QuantizeRequest) -> dict:
    """tiny-llama's cap on AutoRound's iterations, where the recipe asks more (or its
    default); {} for every other model."""
    if req.ref.source != "tiny":
        return {}
    found = {}
    for name, args in req.recipe.modifiers():
        iters = args.get("iters")  # None (`iters:` left empty): the modifier's default
        if name == "AutoRoundModifier" and not (iters is None or _is_count(iters)):
            raise UserError(f"recipe {req.recipe.name}: {name}.iters must be a whole number, "
                            f"got {iters!r}")  # fmt: skip
        if name == "AutoRoundModifier" and (iters is None or iters > TINY_AUTOROUND_ITERS):
            found = {name: {"iters": TINY_AUTOROUND_ITERS}}
    return found


def choose_path(path: str | None, rf: recipe.RecipeFile, workers: int, g: Geometry) -> str:
    """model-free for a data-free recipe unless --path says otherwise; oneshot for the rest."""
    why_not = model_free.unsupported_for(rf, g)
    if workers < 1:
        raise UserError(f"--workers {workers}: at least 1")
    if rf.online:
        if path is not None or workers != 1:
            raise UserError(
                f"recipe {rf.name} is online ({ENGINE} quantizes as it loads): no --path"
            )
        return "oneshot"
    if path is None:
        path = "oneshot" if why_not else "model-free"
    if path not in PATHS:
        raise UserError(f"--path {path!r}: valid: {', '.join(PATHS)}")
    if path == "model-free" and why_not:
        raise UserError(f"--path model-free: recipe {rf.name} cannot take it: {why_not}")
    if workers != 1 and path != "model-free":
        raise UserError(f"--workers {workers}: applies to the model-free path (shards at once)")
    return path


def check_nproc(nproc: int, rf: recipe.RecipeFile, cal: recipe.Calibration) -> None:
    """--nproc splits the calibration samples across processes (one GPU each where there are
    GPUs): refused where there is nothing to split or nothing to run it on."""
    if nproc == 1:
        return
    if nproc < 1:
        raise UserError(f"--nproc {nproc}: at least 1")
    if rf.online or cal.num_samples == 0:
        raise UserError(
            f"--nproc {nproc}: recipe {rf.name} calibrates nothing (no calibration samples); "
            "distributed quantization splits the calibration data, so run it with one process"
        )
    gpus = environment.gpus()
    if gpus and nproc > len(gpus):
        raise UserError(f"--nproc {nproc}: this host has {len(gpus)} GPU(s), one per process")
    if not gpus and nproc > (os.cpu_count() or 1):
        raise UserError(f"--nproc {nproc}: this host has {os.cpu_count()} CPU cores")
    if nproc > cal.num_samples:
        raise UserError(f"--nproc {nproc}: more processes than the {cal.num_samples} samples")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
