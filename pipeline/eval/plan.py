"""The eval stage's plan, from the config alone (no torch): which backend scores, the engines or
the RAM it needs, the reference files it writes, and its time — the measured overheads of this
host's newest eval + the roofline bound of scoring both sides and of generating their answers
(pipeline/perf/timing.py).

BATCH_WINDOWS, the windows per forward both backends score (config/engine_defaults.py), bounds
scoring's memory and sets its steps.
"""

import dataclasses
import math
from typing import TYPE_CHECKING

import psutil

from pipeline.config.engine_defaults import BATCH_WINDOWS
from pipeline.config.engine_name import BACKEND
from pipeline.config.recipe import EvalSettings
from pipeline.core.errors import NotOnThisHost
from pipeline.core.stage_plan import Options, StagePlan, Upstream
from pipeline.engines import engine_plan
from pipeline.eval import answers, backend_choice, floor, policy, prompt_set
from pipeline.eval import windows as windows_of
from pipeline.eval.originals import Originals
from pipeline.models import aliases
from pipeline.perf import bound, host, timing
from pipeline.planning.geometry import Geometry
from pipeline.quantize.memory import RUNTIME

if TYPE_CHECKING:
    from pipeline.artifact import Artifact

GIB = 2**30
# The hf backend's float32 forward on a CPU reaches about half the rate the host probe times on
# one square matmul (its activations and 1 GB of logits a batch are fresh memory each time):
# the real-shape eval's time against its plan checks it (docs/figures.md)
HF_CPU_FORWARD_SHARE = 0.5
CHARS_PER_TOKEN = 4  # a prompt's length before a tokenizer is at hand: English text's usual


@dataclasses.dataclass
class EvalPlan(StagePlan):
    backend: str = "hf"
    backend_reason: str | None = None  # why, where the recipe, the artifact or the host chose
    tokens: int = 0  # scored a side: the held-out and calibration splits
    context_length: int = 0
    engines: dict | None = None  # the vllm backend's, per side
    on_gpus: dict | None = None  # the hf backend's: what the vllm backend would need on GPUs

    def starts_engine(self) -> bool:
        return self.backend == BACKEND


def plan(a: "Artifact", options: Options, up: Upstream) -> EvalPlan:
    """The eval of `a`'s artifact against its original on this host; options.backend as the
    command line gives it (None: the recipe's; auto: vllm where GPUs are seen, else hf)."""
    s = policy.settings(a)
    visible = up.visible
    refused = None
    try:  # the stage's own choice (EvalStage.prepare asks the same)
        choice = backend_choice.choose(a, options.backend, s)
    except NotOnThisHost as e:  # planned as asked, and refused
        asked = options.backend or s.backend
        choice = backend_choice.Choice((BACKEND if visible else "hf") if asked == "auto" else asked)
        refused = str(e)
    chosen = choice.backend
    tokens = 2 * s.max_tokens
    found = EvalPlan(backend=chosen, backend_reason=choice.reason, tokens=tokens,
                     context_length=s.context_length)  # fmt: skip
    original = a.geometry.original_bytes
    sides = {"original": original, a.recipe.name: up.artifact_bytes or original}
    traffic = engine_plan.Traffic(BATCH_WINDOWS, s.context_length + 1, offline=True)  # vllm.LLM
    if chosen == BACKEND:
        placed = engine_plan.on_this_host(a.geometry, sides, visible, traffic, a.recipe)
        found.engines, found.refusals = placed.engines, placed.refusals
    else:
        _on_hf(found, a, sides, visible, traffic)
    if refused:
        found.refusals.insert(0, refused)
    found.files = [
        ("reference (original's log-probs, at most; shared by every recipe)", _reference(a, s)),
        ("per-token drift (tokens.pt)", tokens * 12),
    ]
    found.time_seconds, found.time = _time(a, chosen, s)
    return found


def _on_hf(found: EvalPlan, a: "Artifact", sides: dict, visible: list[str], traffic) -> None:
    """transformers: float32 on CPU, one side at a time; the checkpoint's dtype on GPUs."""
    found.where = "GPUs (device_map auto)" if visible else "CPU, float32"
    found.on_gpus = {
        side: engine_plan.on_reference_gpus(
            a.geometry, weights, traffic, None if side == "original" else a.recipe
        )
        for side, weights in sides.items()
    }
    if visible:
        return
    found.cpu_ram_bytes = cpu_ram_bytes(max(sides.values()), a.geometry, a.recipe.spec.eval)
    available = psutil.virtual_memory().available
    if found.cpu_ram_bytes > available:
        found.refusals.append(
            f"eval (hf, float32 on CPU): ~{found.cpu_ram_bytes / GIB:.1f} GiB of RAM "
            f"for the original; this host has {available / GIB:.1f} GiB available"
        )


def _reference(a: "Artifact", s: EvalSettings) -> int:
    """The original's log-probs at most: k kept tokens a position (ids and log-probs)."""
    vocab = a.geometry.vocab
    id_bytes = 2 if vocab <= 32767 else 4
    return 2 * s.max_tokens * (min(s.reference_max_k, vocab) * (id_bytes + 4) + 12)


def cpu_ram_bytes(checkpoint: int, g: Geometry, s: EvalSettings) -> int:
    """The peak of one side on CPU: its float32 weights (twice a bf16 checkpoint's bytes) and,
    beside them, the larger of what loading maps and what scoring holds. Loading converts the
    memory-mapped checkpoint tensor by tensor, and its mapped pages count in RSS until it ends,
    whatever the eval's window length (the real-shape eval's peak against this plan:
    docs/figures.md)."""
    return checkpoint * 2 + max(checkpoint, scoring_bytes(g, s)) + RUNTIME


def scoring_bytes(g: Geometry, s: EvalSettings) -> int:
    """What scoring holds beside the float32 model on CPU: a batch's logits (float32, every
    vocabulary entry), the log-probs of the window being scored and of the one before it (the
    scorer's)."""
    return (BATCH_WINDOWS + 2) * s.context_length * g.vocab * 4


def _time(a: "Artifact", backend: str, s: EvalSettings) -> tuple[float | None, str]:
    """This host's measured eval overheads + the bound of scoring both sides and of their answers
    (no torch: the host's rates only where something measured them). The figure given is the
    one that applies: without the original's side where an earlier recipe's eval of this model
    stored it here (original_cached), the other said beside it."""
    hw = host.here(measure=False)
    if hw is None:
        return None, "unknown: this host's rates are not measured yet (a serve measures them)"
    heldout = windows_of.covering(s.context_length, s.max_tokens)  # a split: held-out, calibration
    windows = 2 * heldout
    full = Work(s.context_length, windows, windows, heldout)
    what = f"{windows} windows a side, the floor's {heldout}"
    alone_what = f"the artifact's {windows} windows"
    if s.generation.enabled:
        prompts = [math.ceil(sum(len(m["content"]) for m in c) / CHARS_PER_TOKEN)
                   for c in prompt_set.load(s.generation)]  # fmt: skip
        new = s.generation.max_new_tokens
        full = dataclasses.replace(full, prompt_tokens=tuple(prompts), new_tokens=new,
                                   original_answers=True)  # fmt: skip
        what += f", 3 × {len(prompts)} answers of {new} tokens (the original's twice: the floor)"
        alone_what += f", its {len(prompts)} answers of {new} tokens"
    alone = dataclasses.replace(full, original_windows=0, floor_windows=0, original_answers=False)
    # this model's own overheads where it was evaluated here (they go with its layers and its
    # vocabulary, not only with the forwards), else the newest eval's
    observed = timing.observed(f"eval-{backend}:{a.ref.name}") or timing.observed(f"eval-{backend}")
    on = f" on {hw.name}"
    if hf_on_cpu(backend, hw):
        on += f", float32 at {HF_CPU_FORWARD_SHARE:.0%} of its probed matmul rate"
        used, probed = host.threads()
        if used < probed:
            on += f" on {used} of the probe's {probed} threads (OMP_NUM_THREADS)"
    both, both_how = timing.estimate(work_seconds(a.geometry, a.recipe, full, hw, backend),
                                     _overhead(observed, full), what + on)  # fmt: skip
    one, one_how = timing.estimate(work_seconds(a.geometry, a.recipe, alone, hw, backend),
                                   _overhead(observed, alone), alone_what + on)  # fmt: skip
    tasks = one_tasks = ""
    if s.tasks and observed and observed["tasks_seconds"]:
        # the artifact's share where the eval measured it apart (older records: all of it)
        artifact = observed.get("artifact_tasks_seconds") or observed["tasks_seconds"]
        both, one = both + observed["tasks_seconds"], one + artifact
        tasks = f" + lm-eval tasks as measured there ({observed['tasks_seconds']:.0f} s, a floor)"
        one_tasks = f" + the artifact's lm-eval tasks as measured there ({artifact:.0f} s)"
    if original_cached(a, s, backend):
        return one, (
            f"~{timing.duration(one)}: {one_how}{one_tasks}; the original's side is stored here "
            "(an earlier recipe's eval of this model); loading the artifact is not in it; "
            f"~{timing.duration(both)} where the original's side is not stored"
        )
    return both, (
        f"~{timing.duration(both)}: {both_how}{tasks}; loading the two models is not in it; "
        f"~{timing.duration(one)} where the original's side is stored (a later recipe's eval "
        "of this model)"
    )


def original_cached(a: "Artifact", s: EvalSettings, backend: str) -> bool | None:
    """Whether the eval will find the original's side stored (Originals.all_stored); None
    where the original's identity needs a build or a download first (a hub model)."""
    identity = a.model_identity or aliases.identity_here(a.ref)
    if not identity:
        return None
    folder = a.rundir.original / "reference"  # EvalStage.reference_dir
    return Originals(identity, s, a.calibration, backend, folder).all_stored()


def _overhead(observed: dict | None, work: "Work") -> dict | None:
    """This host's measured overheads at `work`: its setup, and its cost a forward at this
    eval's forwards."""
    if not observed:
        return None
    per_forward = observed.get("step_seconds", 0.0) * forwards(work)
    return observed | {"seconds": observed["seconds"] + per_forward}


@dataclasses.dataclass(frozen=True)
class Work:
    """What an eval computes, in windows of `context` tokens: the artifact's (every split), the
    original's where its reference is built now, the held-out ones again for the floor where it
    is (pipeline/eval/floor.py), and the answers (prompt_tokens: one length a prompt; empty: no
    generation), the original's too where they are made now."""

    context: int
    windows: int
    original_windows: int
    floor_windows: int = 0
    prompt_tokens: tuple[int, ...] = ()
    new_tokens: int = 0
    original_answers: bool = False


def work_seconds(g: Geometry, recipe, work: Work, hw, backend: str = "hf") -> float:
    """The roofline of `work` as the backend computes it (_as_computed): each batch of windows
    a prefill, each batch of answers a prefill and a decode step per new token."""
    hw = _as_computed(hw, backend)
    passes = [(recipe, work.windows, BATCH_WINDOWS), (None, work.original_windows, BATCH_WINDOWS),
              (None, work.floor_windows, floor.FLOOR_BATCH)]  # fmt: skip
    seconds = 0.0
    for side, windows, batch in passes:
        if windows:
            fp = bound.footprint(g, side)
            step = bound.prefill(g, fp, hw, min(batch, windows), work.context, "auto", 1)
            seconds += math.ceil(windows / batch) * step.seconds
    return seconds + _answers_seconds(g, recipe, work, hw)


def forwards(work: Work) -> int:
    """The forward passes `work` takes: a batch of windows each, and each batch of answers a
    forward per new token, the first its prefill (the count a per-forward overhead goes with)."""
    scoring = [(work.windows, BATCH_WINDOWS), (work.original_windows, BATCH_WINDOWS),
               (work.floor_windows, floor.FLOOR_BATCH)]  # fmt: skip
    count = sum(math.ceil(windows / batch) for windows, batch in scoring)
    return count + sum(math.ceil(len(work.prompt_tokens) / size) * work.new_tokens
                       for _, size in _answer_runs(work))  # fmt: skip


def _answer_runs(work: Work) -> list[tuple[str | None, int]]:
    """(side, batch size) of each run of answers: None is the original."""
    runs: list[tuple[str | None, int]] = [("artifact", answers.BATCH)] if work.prompt_tokens else []
    if runs and work.original_answers:
        runs += [(None, answers.BATCH), (None, answers.FLOOR_BATCH)]
    return runs


def _answers_seconds(g: Geometry, recipe, work: Work, hw) -> float:
    """The artifact's answers at answers.BATCH and, where the original's are made too, its at
    BATCH and FLOOR_BATCH (the floor); every answer to new_tokens (one that ends early ends its
    batch's steps only when all its rows have)."""
    prompt = max(work.prompt_tokens, default=0)  # each batch left-padded to its longest: about
    prompts, seconds = len(work.prompt_tokens), 0.0
    for side, size in _answer_runs(work):
        fp = bound.footprint(g, recipe if side else None)
        for first in range(0, prompts, size):
            rows = min(size, prompts - first)
            seconds += bound.prefill(g, fp, hw, rows, prompt, "auto", 1).seconds
            middle = prompt + work.new_tokens // 2  # the cached context at the average step
            seconds += work.new_tokens * bound.decode(g, fp, hw, rows, middle, "auto", 1).seconds
    return seconds


def _as_computed(hw, backend: str):
    """`hw` as the backend computes on it: the hf backend on a CPU (hf_on_cpu) computes in
    float32: twice the bytes of bf16 weights, at the share of float32's matmul rate its forward
    reaches (HF_CPU_FORWARD_SHARE), on the threads its process gets (host.float32_rate)."""
    if not hf_on_cpu(backend, hw):
        return hw
    rate = host.float32_rate(hw, *host.threads()) * HF_CPU_FORWARD_SHARE
    return dataclasses.replace(hw, bytes_s=hw.bytes_s / 2, peak_flops={"bf16": rate})


def hf_on_cpu(backend: str, hw) -> bool:
    """The hf backend on a host whose float32 matmul rate was probed: a CPU."""
    return backend == "hf" and bool(hw.peak_flops.get("fp32"))
