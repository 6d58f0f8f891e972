"""The serve stage's plan, from the config alone (no torch): the artifact's serve settings and
where each side runs (`planned`: what the stage starts), the exact `vllm serve` each side starts
(`launches`), each side's engine (here and on reference GPUs), and its time — this host's
measured start-up and per-step overheads + the bound of the benchmark's steps.

    settings, placement = planned(q, overrides)  # what ServeStage.prepare starts; --dry-run too
    launches(q, settings, placement)["quantized"].shell()  # that side's `vllm serve` command
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config.engine_name import ENGINE, PINNED
from pipeline.config.recipe import RecipeFile, ServeSettings
from pipeline.config.strict import validated
from pipeline.core import devices
from pipeline.core.errors import NotOnThisHost, UserError
from pipeline.core.stage_plan import Options, StagePlan, Upstream
from pipeline.engines import bench, engine_plan, server, serving_env, sizing
from pipeline.engines import placement as placing
from pipeline.models.tiny import build as tiny_build
from pipeline.perf import bound, host, timing
from pipeline.planning import deployment, layout, parallel
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import GPUS_PER_NODE
from pipeline.planning.weights import artifact_bytes

if TYPE_CHECKING:
    from pipeline.artifact import Artifact

LOGS_BYTES = 2 * 2**20  # server logs and benchmark results


@dataclass
class ServePlan(StagePlan):
    engines: dict = field(default_factory=dict)  # per side: here and on reference GPUs
    placement: dict | None = None  # where each side runs (GPU hosts), or why not
    launches: dict = field(default_factory=dict)  # per side: the `vllm serve` it starts
    users: int = 0
    context: int = 0

    def starts_engine(self) -> bool:
        return True


def plan(a: "Artifact", options: Options, up: Upstream) -> ServePlan:
    s = a.recipe.spec.serve
    traffic = engine_plan.Traffic(max(s.concurrency), s.input_len + s.output_len)
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
        settings, placed = planned(a, options.serve_overrides or {})
    except NotOnThisHost as e:
        found.refusals.append(str(e))
        found.placement = {"refused": str(e)}
        return found
    try:  # what this host's serving env refuses of them: the stage refuses the same
        if not serving_env.available():
            raise NotOnThisHost(f"serve needs the serving env ({serving_env.SERVE_PYTHON})")
        serving_env.require("serve")  # a build this host runs, as ServeStage.prepare asks
        refuse_unservable(a, settings)
    except NotOnThisHost as e:
        found.refusals.append(str(e))
    if placed.mode != "cpu":
        _engines_as_placed(found, placed, sides)
    found.launches = {
        side: {"command": launch.shell(), "argv": launch.argv, "env": launch.env}
        for side, launch in launches(a, settings, placed).items()
    }
    return found


def _engines_as_placed(found: ServePlan, placed: placing.Placement, sides: dict) -> None:
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


def planned(
    q: "Artifact", overrides: dict | None = None
) -> tuple[ServeSettings, placing.Placement]:
    """The artifact's serve settings (the recipe's, the command line's overrides, as placed)
    and where each side runs: what the stage starts and what its dry run shows. Refuses a
    tensor-parallel size vLLM would refuse (UserError) or one larger than the GPUs seen
    (NotOnThisHost)."""
    base = q.recipe.spec.serve.model_dump()
    settings = validated(ServeSettings, {**base, **(overrides or {})}, "serve settings")
    check_fit(settings, q.geometry)
    placement = _placed(q, settings, overrides or {})
    if (
        placement.mode == "cpu"
        and settings.tensor_parallel_size * settings.pipeline_parallel_size > 1
    ):
        raise NotOnThisHost(
            f"tensor_parallel_size {settings.tensor_parallel_size} × pipeline_parallel_size "
            f"{settings.pipeline_parallel_size}: no GPU visible, and on a CPU the pipeline serves "
            f"each side as one {ENGINE} engine (ranks would split this host's cores, measuring "
            "nothing a GPU layout does): leave them at 1 here, or serve on a GPU host"
        )
    settings = _as_placed(settings, placement.side("quantized"))
    if placement.side("quantized").gpus:  # the TP as placed (given, or the planner's)
        settings = _expert_parallel(q, settings, overrides or {})
        check_fit(settings, q.geometry, q.recipe)  # blocks or groups straddling a shard: refused
    return settings, placement


def refuse_unservable(q: "Artifact", settings: ServeSettings) -> None:
    """What this host's serving env refuses of the planned serve (NotOnThisHost): each scheme
    of the recipe, its experts' kernels, its KV-cache dtype. ServeStage.prepare and its dry run
    both ask here."""
    serving_env.require_online(q.recipe, "serve")
    for scheme, _ in q.recipe.schemes():  # a mixed-precision recipe: each of its schemes
        serving_env.require_scheme(scheme, "serve")
        serving_env.require_moe(scheme, q.geometry, "serve")
    serving_env.require_kv_cache(
        settings.kv_cache_dtype, "serve", "; --kv-cache-dtype auto measures the weights alone"
    )


def _expert_parallel(q: "Artifact", settings: ServeSettings, overrides: dict):
    """Expert parallel on where the placed TP would slice the experts through the recipe's
    blocks or groups and whole experts load (planning/deployment.split), unless the recipe or
    the command line says otherwise."""

    if "expert_parallel" in q.recipe.spec.serve.model_fields_set | set(overrides):
        return settings
    found = deployment.split(q.geometry, q.recipe, settings.tensor_parallel_size)
    return settings.model_copy(update={"expert_parallel": found.expert_parallel})


def original_settings(settings: ServeSettings, placement: placing.Placement) -> ServeSettings:
    """The original as it is served without the pipeline: its own 16-bit KV cache (an FP8 KV
    cache is part of what a recipe buys, so it is compared against the original's), on the GPUs
    the placement gave it (it may need more than the artifact)."""
    settings = settings.model_copy(update={"kv_cache_dtype": "auto"})
    return _as_placed(settings, placement.side("original"))


def launches(
    q: "Artifact", settings: ServeSettings, placement: placing.Placement
) -> dict[str, server.Launch]:
    """Each side's vLLM server as the stage starts it ({"original", "quantized"}), for the dry
    run: the stage picks free ports at start-up; here 8000 and 8001, so that both lines paste
    as they are."""

    original = q.model_path or q.ref.path or q.ref.hub_id or tiny_build.cached_path()
    sides = {
        "original": (original, "original", original_settings(settings, placement), []),
        "quantized": (
            original if q.recipe.online else q.artifact,
            q.recipe.name,
            settings,
            q.recipe.engine_args(),
        ),
    }
    return {
        key: server.launch(Path(model), f"{q.ref.name}-{name}", s, 8000 + i,
                           bench.max_model_len_of(q.geometry, s), extra, placement.side(key).gpus)
        for i, (key, (model, name, s, extra)) in enumerate(sides.items())
    }  # fmt: skip


def _placed(q: "Artifact", settings: ServeSettings, overrides: dict) -> placing.Placement:
    """Where each side runs on the GPUs this process sees. Each side's TP comes from the
    planner for the sweep's largest concurrency × (input + output) tokens, unless the recipe
    or the command line sets tensor_parallel_size (then both sides take it). With the cached
    original, each side is placed as a paired run places it (the "alone" mode: only the
    artifact's server starts), so that both sides compare at the same share and TP."""

    given = "tensor_parallel_size" in q.recipe.spec.serve.model_fields_set | set(overrides)
    users, context = max(settings.concurrency), settings.input_len + settings.output_len
    sides = [
        sizing.ServeSide("original", "original", q.geometry.original_bytes, "auto"),
        sizing.ServeSide(
            "quantized",
            q.recipe.name,
            artifact_bytes(q.recipe, q.geometry),
            settings.kv_cache_dtype,
            q.recipe,
        ),
    ]
    found = sizing.serve_placement(
        q.geometry,
        sides,
        devices.seen(),
        users,
        context,
        settings.tensor_parallel_size if given else None,
        settings.gpu_memory_utilization,
        settings.pipeline_parallel_size,
        max_model_len=bench.max_model_len_of(q.geometry, settings),  # what the servers start with
    )
    if settings.original == "paired" or found.mode == "cpu":
        return found
    return placing.Placement(
        "alone",
        found.sides,
        f"the original from its cached reference, the artifact served alone; each where a "
        f"paired serve places it ({found.mode}), at the same share and TP",
    )


def _as_placed(settings: ServeSettings, placed: placing.SidePlace) -> ServeSettings:
    if not placed.gpus:  # CPU: the settings as they are
        return settings
    update = {
        "tensor_parallel_size": placed.tensor_parallel_size,
        "gpu_memory_utilization": placed.memory_share,
    }
    return settings.model_copy(update=update)


def check_fit(
    settings: ServeSettings, g: Geometry | None, recipe: RecipeFile | None = None
) -> None:
    """What vLLM would refuse at start-up, after minutes of quantizing: refused up front —
    with `recipe`, also a TP whose split straddles its blocks or groups (planning/layout.py).
    g None: a model whose shape is unknown here (only the settings are checked)."""
    tp = settings.tensor_parallel_size
    if g is not None and (why := parallel.tp_refusal(tp, g)):
        valid = parallel.tensor_parallel_sizes(g, GPUS_PER_NODE)
        raise UserError(
            f"tensor_parallel_size {tp}: {ENGINE} refuses it for this model: {why} "
            f"(valid within a node: {', '.join(map(str, valid))})"
        )
    if recipe is not None and g is not None:
        _check_layout(tp, settings.expert_parallel, g, recipe)
    longest = g.max_position if g is not None else None
    if settings.max_model_len and longest and settings.max_model_len > longest:
        raise UserError(
            f"max_model_len {settings.max_model_len:,} is longer than the model's "
            f"max_position_embeddings {longest:,}"
        )


def _check_layout(tp: int, expert_parallel: bool, g: Geometry, recipe: RecipeFile) -> None:
    """vLLM refuses weights whose blocks or groups straddle a TP shard: one line naming the
    layouts that load."""

    if not (why := layout.recipe_refusal(g, recipe, tp, expert_parallel)):
        return
    loads = []
    for size in parallel.tensor_parallel_sizes(g, GPUS_PER_NODE):
        found = deployment.split(g, recipe, size)
        if found.loads:
            loads.append(f"{size} with --expert-parallel" if found.expert_parallel else str(size))
    why = why.replace(f"({layout.EP_FLAG})", "(--expert-parallel)")
    raise UserError(
        f"tensor_parallel_size {tp}: {PINNED} would refuse {recipe.name}'s artifact: {why} "
        f"(loads at TP {', '.join(loads) or 'none within a node'})"
    )
