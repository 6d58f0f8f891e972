"""The serve stage's plan, from the config alone (no torch): each side's engine (here and on
reference GPUs), where the two sides run and the exact `vllm serve` each starts (the stage's own
settings and placement: serve/stage.py's `planned` and `launches`), and its time — this host's
measured start-up and per-step overheads + the bound of the benchmark's steps."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.core.errors import NotOnThisHost
from pipeline.core.stage_plan import Options, StagePlan, Upstream
from pipeline.perf import bound, host, timing
from pipeline.planning import engine_plan
from pipeline.planning.engine_plan import Traffic
from pipeline.planning.geometry import Geometry
from pipeline.serve import stage as serve_stage

if TYPE_CHECKING:
    from pipeline.core.artifact import Artifact

LOGS_BYTES = 2 * 2**20  # server logs and benchmark results


@dataclass
class ServePlan(StagePlan):
    engines: dict = field(default_factory=dict)  # per side: here and on reference GPUs
    placement: dict | None = None  # where each side runs (GPU hosts), or why not
    launches: dict = field(default_factory=dict)  # per side: the `vllm serve` it starts
    users: int = 0
    context: int = 0

    def starts_vllm(self) -> bool:
        return True


def plan(a: "Artifact", options: Options, up: Upstream) -> ServePlan:
    s = a.recipe.spec.serve
    traffic = Traffic(max(s.concurrency), s.input_len + s.output_len)
    original = a.geometry.original_bytes
    sides = {"original": original, a.recipe.name: up.artifact_bytes or original}
    placed_here = engine_plan.on_this_host(a.geometry, sides, up.visible, traffic, a.recipe)
    found = ServePlan(
        engines=placed_here.engines,
        refusals=placed_here.refusals,
        users=traffic.users,
        context=traffic.context,
        files=[("server logs and benchmark results", LOGS_BYTES)],
    )
    found.time_seconds, found.time = _time(a, s)
    try:  # the stage's own settings, placement and launches: what `serve` would start
        settings, placed = serve_stage.planned(a, options.serve_overrides or {})
    except NotOnThisHost as e:
        found.refusals.append(str(e))
        found.placement = {"refused": str(e)}
        return found
    if placed.mode != "cpu":
        _as_placed(found, placed, sides)
    found.launches = {
        side: {"command": launch.shell(), "argv": launch.argv, "env": launch.env}
        for side, launch in serve_stage.launches(a, settings, placed).items()
    }
    return found


def _as_placed(found: ServePlan, placed, sides: dict) -> None:
    """Each engine as the placement sizes it (the command line's --tensor-parallel-size …)."""
    for label, engine in found.engines.items():
        side = placed.side("original" if label == "original" else "quantized")
        if "refused" not in engine:
            engine["tensor_parallel_size"] = side.tensor_parallel_size
            engine["pipeline_parallel_size"] = side.pipeline_parallel_size
            engine["weights_per_gpu_bytes"] = int(sides[label] / len(side.gpus))
    found.placement = {
        **placed.record(),
        "sides": {side.label: {**side.record(), "describe": side.describe()}
                  for side in placed.sides},
    }  # fmt: skip


def _time(a: "Artifact", s) -> tuple[float | None, str]:
    """Measured start-up and per-step overheads + the bound of the benchmarks' steps."""
    hw = host.here(measure=False)
    if hw is None:
        return None, "unknown: this host's rates are not measured yet (a serve measures them)"
    levels = work(a.geometry, a.recipe, s, hw)
    seconds = sum(lv["benchmark_seconds"] for lv in levels.values())
    overhead = timing.observed("serve")
    if overhead:  # each measured step took this much beyond its bound at that concurrency
        for c in levels:
            steps = overhead["step_seconds"]
            near = min(steps, key=lambda k: abs(int(k) - c), default=None)
            batch = min(c, s.num_prompts)
            rounds = -(-s.num_prompts // batch)
            seconds += (steps[near] if near else 0) * 2 * s.repeats * rounds * s.output_len
    seconds, how = timing.estimate(
        seconds, overhead, f"{len(levels)} levels × 2 sides on {hw.name}"
    )
    return seconds, f"~{timing.duration(seconds)}: {how}"


def work(g: Geometry, recipe, settings, hw, gpus: int = 1) -> dict:
    """Per concurrency level: the bound of one decode step per side, and of the whole
    benchmark (every repeat of both sides: prefills and output_len steps per round)."""
    context = settings.input_len + settings.output_len // 2
    sides = {"original": (None, "auto"), "quantized": (recipe, settings.kv_cache_dtype)}
    levels = {}
    for c in settings.concurrency:
        batch = min(c, settings.num_prompts)
        rounds = -(-settings.num_prompts // batch)
        steps, total = {}, 0.0
        for side, (r, kv) in sides.items():
            fp = bound.footprint(g, r)
            step = bound.decode(g, fp, hw, batch, context, kv, gpus).seconds
            prefill = bound.prefill(g, fp, hw, batch, settings.input_len, kv, gpus).seconds
            steps[side] = step
            total += settings.repeats * rounds * (prefill + settings.output_len * step)
        levels[c] = {"step_seconds": steps, "benchmark_seconds": total}
    return levels
