"""One plan for the chain: `run|eval|serve --dry-run`, offline, from the config alone.

Per stage: where it runs (host, GPUs, tensor parallel per side), its memory (CPU RAM peak,
per-GPU), the files it writes or downloads with their sizes, and a time estimate with how it
was derived. It composes the per-stage plans rather than repeating their arithmetic:
quantize's from pipeline/quantize/plan.py (via the stage), the engines from
pipeline/planning/engines.py (the deployment planner's). What this host cannot do — an engine
larger than its GPUs, disk short of what the chain writes — is listed under `refusals`; the
command then exits 4 before any download or load.

Time: the quantize stage's rate (bytes of bf16 weights per second) measured on this host by
earlier runs under the same runs root and path, where there is one (`measured`); otherwise
no figure (`unknown: no run measured on this host yet`). Eval and serve: this host's overheads
measured by its newest eval / serve (any model) + the roofline bound of this run's work
(pipeline/perf/timing.py); the bound alone, said to be one, where nothing was measured yet.
"""

import json
import shutil
from pathlib import Path

from pipeline.core import environment
from pipeline.core.errors import NotOnThisHost
from pipeline.core.paths import runs_root
from pipeline.planning import engines
from pipeline.planning.geometry import Geometry
from pipeline.quantize import memory

GIB = 2**30
EVAL_BATCH = 4  # windows per engine step (pipeline/eval/backends/vllm.py BATCH_WINDOWS)
REFERENCE_GPU = "H100-80GB"  # what a GPU host would need, shown on every host
CPU_ENGINE_EXTRA = 2 * GIB  # vLLM's CPU engine beside its weights: 1 GiB KV pool + runtime


def build(
    q, stages: tuple[str, ...], backend: str | None = None, serve_overrides: dict | None = None
) -> dict:
    """The chain's plan for quantize stage `q` followed by `stages` (eval, serve);
    serve_overrides: the serve settings the command line sets (as the serve stage takes them)."""
    gpus = environment.gpus()
    original = q.geometry.original_bytes
    quantize = q.plan()
    memory = quantize.get("memory_bytes") or {}  # an import's plan is its detected format
    artifact = 0 if q.recipe.online else memory.get("artifact_estimate", 0)
    imported = "import" in quantize  # a checkpoint quantized elsewhere: its bytes as shipped
    if imported:
        artifact = quantize["ideal_bytes"]
    plan = {
        "model": q.ref.name,
        "recipe": q.recipe.name,
        "host": {"gpus": gpus, "cpu_count": environment.host()["cpu_count"], **_seen()},
        "stages": {},
        "refusals": [],
    }
    from pipeline.core.serving_env import driver_refusals

    plan["refusals"] += driver_refusals()  # CUDA builds the driver cannot run: before any stage
    downloads = [] if q.ref.source in ("local", "tiny") else [("original (hub cache)", original)]
    plan["stages"]["quantize"] = {
        "where": quantize.get("placement", "nothing to quantize (online or imported)"),
        "cpu_ram_bytes": memory.get("cpu_ram_peak_estimate", 0),
        "device_bytes": memory.get("device_peak_estimate", 0),
        "files": [*downloads, ("artifact" + (" (imported)" if imported else ""), artifact)],
    }
    seconds, how = (0.0, "nothing to quantize") if imported else _quantize_time(q, original)
    plan["stages"]["quantize"] |= {"time_seconds": seconds, "time": how}
    verdict = getattr(q, "memory_verdict", None)  # an imported artifact quantizes nothing
    if verdict and (fit := verdict(q.max_memory)):
        plan["refusals"].append(fit)
    if "eval" in stages:
        plan["stages"]["eval"] = _eval(q, gpus, original, artifact, backend, plan["refusals"])
    if "serve" in stages:
        plan["stages"]["serve"] = _serve(q, gpus, original, artifact, plan["refusals"],
                                         serve_overrides or {})  # fmt: skip
    _processes(plan["stages"])
    plan["disk"] = _disk(plan["stages"], plan["refusals"])
    return plan


def _processes(stages: dict) -> None:
    """Which stages work in a process of their own (flow.in_own_process: where GPUs are seen
    and a later stage starts vLLM), so that they leave no GPU memory to the next."""
    from types import SimpleNamespace

    from pipeline.chain import flow

    kinds = [SimpleNamespace(name=n, backend=s.get("backend")) for n, s in stages.items()]
    for i, stage in enumerate(stages.values()):
        if flow.in_own_process(kinds[i], kinds[i + 1 :]):
            stage["process"] = "its own: its GPU memory is freed before vLLM starts"
            stage["leaves_on_gpus_bytes"] = 0


def _seen() -> dict:
    """How the visible GPUs came about: nvidia-smi's list and CUDA_VISIBLE_DEVICES."""
    import os

    from pipeline.core import devices

    return {
        "gpus_listed": len(devices.listed()),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _disk(stages: dict, refusals: list) -> list[dict]:
    """Bytes written per filesystem (the hub cache's and the runs root's may differ) against
    what each has free."""
    import os

    from pipeline.core.paths import hub_cache

    places = {}
    for stage in stages.values():
        for what, size in stage["files"]:
            root = hub_cache() if what.startswith("original (hub") else runs_root()
            existing = _existing(root)
            device = os.stat(existing).st_dev
            place = places.setdefault(device, {"roots": set(), "total_bytes": 0})
            place["roots"].add(str(root))
            place["total_bytes"] += size
            place["free_bytes"] = shutil.disk_usage(existing).free
    found = []
    for place in places.values():
        roots = ", ".join(sorted(place["roots"]))
        found.append({**place, "roots": roots})
        if place["total_bytes"] > place["free_bytes"]:
            refusals.append(
                f"disk: the chain writes ~{place['total_bytes'] / GIB:.1f} GiB under {roots}; "
                f"{place['free_bytes'] / GIB:.1f} GiB free there; point "
                f"{_fix(place['roots'])} at a bigger disk"
            )
    return found


def _fix(roots: set) -> str:
    """The variables that move what the chain writes under `roots`."""
    from pipeline.core.paths import hub_cache

    hub = str(hub_cache()) in roots
    runs = str(runs_root()) in roots
    return " or ".join(["HF_HUB_CACHE"] * hub + ["RUNS_DIR"] * runs) or "them"


def _engines(g, sides: dict, gpus, users: int, context: int, refusals: list, recipe=None) -> dict:
    """Each side's engine on this host, and on REFERENCE_GPU GPUs (what a GPU host needs); the
    quantized side's layouts as vLLM loads the recipe's artifact (planning/layout.py)."""
    import psutil

    found = {}
    for side, weights in sides.items():
        mine = None if side == "original" else recipe
        on_gpus = _on_gpus(g, weights, users, context, side, mine)
        try:
            engine = engines.engine(g, weights, gpus, users, context, side, recipe=mine)
        except NotOnThisHost as e:
            refusals.append(str(e))
            found[side] = {"refused": str(e), "on_gpus": on_gpus}
            continue
        entry = {**engine.describe(), "on_gpus": on_gpus}
        if gpus:
            entry["weights_per_gpu_bytes"] = int(weights / engine.tensor_parallel_size)
        else:  # the CPU engine holds the weights in RAM
            entry["cpu_ram_bytes"] = weights + CPU_ENGINE_EXTRA
            available = psutil.virtual_memory().available
            if entry["cpu_ram_bytes"] > available:
                why = (
                    f"{side}: vLLM's CPU engine needs ~{entry['cpu_ram_bytes'] / GIB:.1f} GiB "
                    f"of RAM (weights + KV pool); this host has {available / GIB:.1f} GiB "
                    f"available; on GPUs it needs {on_gpus['tensor_parallel_size']} × "
                    f"{REFERENCE_GPU}"
                )
                refusals.append(why)
                entry["refused"] = why
        found[side] = entry
    return found


def _on_gpus(g: Geometry, weights: int, users: int, context: int, side: str, recipe=None) -> dict:
    """What REFERENCE_GPU GPUs would need (the deployment planner, nodes of 8):
    tensor_parallel_size is the GPU count, TP × PP (None: more than 8 nodes hold). `recipe`
    (the quantized side's): a TP vLLM loads its artifact at, expert parallel where it must;
    the original (None) is never refused."""
    from pipeline.planning import deployment, gpus

    load = deployment.Load(weights, "auto", users, context)
    found = deployment.fewest(g, load, gpus.named(REFERENCE_GPU), recipe=recipe)
    if found is None:
        return {"gpu": REFERENCE_GPU, "tensor_parallel_size": None, "tp": None, "pp": None}
    tp, pp = found.tensor_parallel_size, found.pipeline_parallel_size
    placed = {"gpu": REFERENCE_GPU, "tensor_parallel_size": found.gpus, "tp": tp, "pp": pp}
    if found.expert_parallel:
        placed |= {"expert_parallel": True, "refused": list(found.refused)}
    return placed


def _eval(q, gpus, original: int, artifact: int, backend, refusals: list) -> dict:
    s = q.recipe.spec.eval
    chosen = backend or (s.backend if s.backend != "auto" else ("vllm" if gpus else "hf"))
    tokens = 2 * s.max_tokens  # held-out and calibration splits
    vocab = q.geometry.vocab
    k = min(s.reference_max_k, vocab)
    id_bytes = 2 if vocab <= 32767 else 4
    reference = tokens * (k * (id_bytes + 4) + 12)  # at most: k kept tokens a position
    found = {"backend": chosen, "tokens": tokens, "context_length": s.context_length}
    sides = {"original": original, q.recipe.name: artifact or original}
    if chosen == "vllm":
        found["engines"] = _engines(q.geometry, sides, gpus, EVAL_BATCH, s.context_length + 1,
                                    refusals, q.recipe)  # fmt: skip
        found["cpu_ram_bytes"] = 0
    else:  # transformers: float32 on CPU, one side at a time; the checkpoint's dtype on GPUs
        import psutil

        largest = max(sides.values())
        found["where"] = "GPUs (device_map auto)" if gpus else "CPU, float32"
        found["on_gpus"] = {  # what the vllm backend would need on a GPU host
            side: _on_gpus(
                q.geometry,
                weights,
                EVAL_BATCH,
                s.context_length + 1,
                side,
                None if side == "original" else q.recipe,
            )  # fmt: skip
            for side, weights in sides.items()
        }
        found["cpu_ram_bytes"] = 0 if gpus else largest * 2 + _scoring_bytes(q.geometry, s)
        available = psutil.virtual_memory().available
        if found["cpu_ram_bytes"] > available:
            refusals.append(
                f"eval (hf, float32 on CPU): ~{found['cpu_ram_bytes'] / GIB:.1f} GiB of RAM "
                f"for the original; this host has {available / GIB:.1f} GiB available"
            )
    found["files"] = [
        ("reference (original's log-probs, at most; shared by every recipe)", reference),
        ("per-token drift (tokens.pt)", tokens * 12),
    ]
    found["time_seconds"], found["time"] = _eval_time(q, chosen, tokens // 2)
    return found


def _scoring_bytes(g: Geometry, s) -> int:
    """What scoring holds beside the float32 model on CPU: a batch's logits (float32, every
    vocabulary entry), the log-probs of the window being scored and of the one before it (the
    scorer's), and the runtime. At Llama-3-8B's vocabulary (128,256): 7.6 GiB peak measured, 6.8
    planned (2026-12-03, tests/e2e/test_real_shape_chain.py)."""
    vocab, context = g.vocab, s.context_length
    return (EVAL_BATCH + 2) * context * vocab * 4 + memory.RUNTIME


def _serve(q, gpus, original: int, artifact: int, refusals: list, overrides: dict) -> dict:
    from pipeline.serve import stage as serve_stage

    s = q.recipe.spec.serve
    users, context = max(s.concurrency), s.input_len + s.output_len
    sides = {"original": original, q.recipe.name: artifact or original}
    seconds, how = _serve_time(q, s)
    found = {
        "engines": _engines(q.geometry, sides, gpus, users, context, refusals, q.recipe),
        "placement": None,
        "launches": {},
        "users": users,
        "context": context,
        "files": [("server logs and benchmark results", 2 * 2**20)],
        "time_seconds": seconds,
        "time": how,
    }
    try:  # the stage's own settings, placement and launches: what `serve` would start
        settings, placed = serve_stage.planned(q, overrides)
    except NotOnThisHost as e:
        refusals.append(str(e))
        found["placement"] = {"refused": str(e)}
        return found
    if placed.mode != "cpu":
        for label, engine in found["engines"].items():  # as placed: the command line's sizes
            side = placed.side("original" if label == "original" else "quantized")
            if "refused" not in engine:
                engine["tensor_parallel_size"] = side.tensor_parallel_size
                engine["pipeline_parallel_size"] = side.pipeline_parallel_size
                engine["weights_per_gpu_bytes"] = int(sides[label] / len(side.gpus))
        found["placement"] = {
            **placed.record(),
            "sides": {side.label: {**side.record(), "describe": side.describe()}
                      for side in placed.sides},
        }  # fmt: skip
    found["launches"] = {
        side: {"command": launch.shell(), "argv": launch.argv, "env": launch.env}
        for side, launch in serve_stage.launches(q, settings, placed).items()
    }
    return found


def _eval_time(q, backend: str, per_split: int) -> tuple[float | None, str]:
    """This host's measured eval overheads + the bound of scoring both sides (no torch: the
    host's rates only where something measured them)."""
    from pipeline.perf import host, timing

    hw = host.here(measure=False)
    if hw is None:
        return None, "unknown: this host's rates are not measured yet (a serve measures them)"
    s = q.recipe.spec.eval
    windows = 2 * (per_split // s.context_length)  # held-out and calibration splits
    work = timing.eval_work(
        q.geometry, q.recipe, windows * s.context_length, s.context_length, hw, backend=backend
    )
    overhead = timing.observed(f"eval-{backend}")
    what = f"{windows} windows a side on {hw.name}"
    if timing.hf_on_cpu(backend, hw):
        what += f", float32 at {timing.HF_CPU_FORWARD_SHARE:.0%} of its probed matmul rate"
    seconds, how = timing.estimate(work, overhead, what)
    if s.tasks and overhead and overhead["tasks_seconds"]:
        seconds += overhead["tasks_seconds"]
        how += f" + lm-eval tasks as measured there ({overhead['tasks_seconds']:.0f} s, a floor)"
    return seconds, f"~{_duration(seconds)}: {how}; loading the two models is not in it"


def _serve_time(q, s) -> tuple[float | None, str]:
    """Measured start-up and per-step overheads + the bound of the benchmarks' steps."""
    from pipeline.perf import host, timing

    hw = host.here(measure=False)
    if hw is None:
        return None, "unknown: this host's rates are not measured yet (a serve measures them)"
    levels = timing.serve_work(q.geometry, q.recipe, s, hw)
    work = sum(lv["benchmark_seconds"] for lv in levels.values())
    overhead = timing.observed("serve")
    if overhead:  # each measured step took this much beyond its bound at that concurrency
        for c in levels:
            steps = overhead["step_seconds"]
            near = min(steps, key=lambda k: abs(int(k) - c), default=None)
            batch = min(c, s.num_prompts)
            rounds = -(-s.num_prompts // batch)
            work += (steps[near] if near else 0) * 2 * s.repeats * rounds * s.output_len
    seconds, how = timing.estimate(work, overhead, f"{len(levels)} levels × 2 sides on {hw.name}")
    return seconds, f"~{_duration(seconds)}: {how}"


def _quantize_time(q, original: int) -> tuple[float | None, str]:
    """From the newest earlier run on this host with the same path: bf16 bytes per second."""
    rates = []
    host = environment.host()["hostname"]
    for path in runs_root().glob("*/*/manifest.json"):
        try:
            entry = json.loads(path.read_text())["stages"]["quantize"]
        except (OSError, ValueError, KeyError):
            continue
        m = entry.get("metrics") or {}
        same_host = (entry.get("environment") or {}).get("hostname") == host
        if same_host and m.get("path") == getattr(q, "path", None) and m.get("bytes_per_second"):
            rates.append((entry.get("ended") or "", m["bytes_per_second"], path.parent))
    if not rates:
        return None, "unknown: no quantize on this path measured on this host yet"
    _, rate, where = max(rates)
    seconds = original / rate
    how = f"~{_duration(seconds)} (measured: {rate / 2**20:,.0f} MiB/s of bf16 weights, {where})"
    return seconds, how


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _count(ref: dict) -> str:
    """GPUs a reference layout needs: 2, or 8×2 across nodes, or >64."""
    if not ref["tensor_parallel_size"]:
        return ">64"
    if ref["pp"] and ref["pp"] > 1:
        return f"{ref['tp']}×{ref['pp']}"
    return str(ref["tensor_parallel_size"])


def _existing(root: Path) -> Path:
    path = root
    while not path.exists():
        path = path.parent
    return path


def render(plan: dict) -> str:
    lines = [f"chain plan: {plan['model']} × {plan['recipe']}"]
    host = plan["host"]
    if host["gpus_listed"]:
        names = sorted(set(g.split(",")[0] for g in host["gpus"])) or ["none"]
        how = f"nvidia-smi lists {host['gpus_listed']}"
        if host["cuda_visible_devices"] is not None:
            how = f"CUDA_VISIBLE_DEVICES={host['cuda_visible_devices']}; {how}"
        lines.append(f"GPUs        {len(host['gpus'])} seen: {', '.join(names)} ({how})")
    for name, stage in plan["stages"].items():
        lines.append(f"{name}")
        if where := stage.get("where"):
            lines.append(f"  where      {where}")
        if stage.get("backend"):
            lines.append(f"  backend    {stage['backend']}, {stage['tokens']:,} tokens scored")
        for side, ref in (stage.get("on_gpus") or {}).items():
            n = _count(ref)
            lines.append(f"  {side:<10} with vLLM on {ref['gpu']}: {n} GPU(s)")
        if (placed := stage.get("placement")) and "mode" in placed:
            lines.append(f"  placement  {placed['mode']}: {placed['reason']}")
            for side in placed["sides"].values():
                lines.append(f"  {'':<10} {side['describe']}")
        for side, launch in (stage.get("launches") or {}).items():
            lines.append(f"  launch     {side}: {launch['command']}")
        for side, engine in (stage.get("engines") or {}).items():
            ref = engine["on_gpus"]
            needs = f"on {ref['gpu']}: {_count(ref)} GPU(s)"
            if "refused" in engine:
                lines.append(f"  {side:<10} {needs}; here refused: {engine['refused']}")
            elif plan["host"]["gpus"]:
                pp = engine.get("pipeline_parallel_size", 1)
                stages = f" × pipeline {pp}" if pp > 1 else ""
                lines.append(
                    f"  {side:<10} tensor parallel {engine['tensor_parallel_size']}{stages}, "
                    f"{engine['weights_per_gpu_bytes'] / GIB:.1f} GiB of weights per GPU"
                )
            else:
                lines.append(
                    f"  {side:<10} {needs}; here one CPU engine, "
                    f"~{engine['cpu_ram_bytes'] / GIB:.1f} GiB of RAM"
                )
        if stage.get("cpu_ram_bytes"):
            lines.append(f"  CPU RAM    ~{stage['cpu_ram_bytes'] / GIB:.1f} GiB peak")
        if stage.get("process"):
            lines.append(f"  process    {stage['process']}")
        for what, size in stage["files"]:
            lines.append(f"  disk       {size / GIB:8.2f} GiB  {what}")
        lines.append(f"  time       {stage['time']}")
    for place in plan["disk"]:
        lines.append(
            f"disk total  ~{place['total_bytes'] / GIB:.1f} GiB under {place['roots']}; "
            f"{place['free_bytes'] / GIB:.1f} GiB free there"
        )
    for refusal in plan["refusals"]:
        lines.append(f"refused     {refusal}")
    return "\n".join(lines)


def disk_and_time_lines(plan: dict) -> str:
    """The quantize plan's tail: what it writes where, the free space there, its time and
    what this host refuses (`plan`: the quantize plan with the chain's files, disk, time and
    refusals)."""
    lines = [f"disk        {size / GIB:8.2f} GiB  {what}" for what, size in plan["files"]]
    for place in plan["disk"]:
        lines.append(
            f"disk total  ~{place['total_bytes'] / GIB:.1f} GiB under {place['roots']}; "
            f"{place['free_bytes'] / GIB:.1f} GiB free there"
        )
    lines.append(f"time        {plan['time']}")
    lines += [f"refused     {refusal} (exit 4)" for refusal in plan["refusals"]]
    return "\n".join(lines)
