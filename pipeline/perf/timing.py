"""Time estimates for the chain's plan: this host's measured overheads + the roofline bound.

A stage's wall time splits into what does not grow with the model — imports, tokenizing, engine
start-up, per-step scheduling — and the work, which does (FLOPs and bytes: this host's roofline,
pipeline/perf/host.py, or a GPU's). Each finished eval and serve records its overheads here
(its wall time minus its own bound); the plan adds the next run's bound to the newest of them.
Without an earlier run on this host the estimate is the bound alone, said to be a lower bound.
lm-eval tasks are added as measured (their time grows with the model: a floor).
"""

import dataclasses
import json
import math

from pipeline.core import environment
from pipeline.core.files import sha256_text, write_json_atomic
from pipeline.core.paths import cache_root
from pipeline.perf import bound
from pipeline.planning.geometry import Geometry

EVAL_BATCH = 4  # windows per forward (pipeline/eval/backends: hf batch_size, vllm BATCH_WINDOWS)
# The hf backend's float32 forward on a CPU reaches about half the rate the host probe times on
# one square matmul (its activations and 1 GB of logits a batch are fresh memory each time):
# 187 of 362 GFLOPS at Llama-3-8B's shapes, cProfile of the eval, 2-core Xeon, 2026-12-03.
HF_CPU_FORWARD_SHARE = 0.5


def _path():
    info = environment.host()
    key = sha256_text(f"{info['hostname']} {info['cpu_model']} {info['gpus']}")[:12]
    return cache_root() / f"host-timings-{key}.json"


def record(stage: str, values: dict) -> None:
    """Keep the newest overheads of `stage` measured on this host."""
    path = _path()
    try:
        found = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        found = {}
    found[stage] = values
    write_json_atomic(path, found)


def observed(stage: str) -> dict | None:
    path = _path()
    try:
        return json.loads(path.read_text()).get(stage) if path.is_file() else None
    except (OSError, ValueError):
        return None


def eval_work(
    g: Geometry, recipe, tokens: int, context: int, hw, sides: int = 2, backend: str = "hf"
) -> float:
    """The seconds of scoring `tokens` tokens a side in `context`-token windows: the artifact,
    and (sides=2) the original, whose log-probs become the reference; their roofline, except
    that the hf backend on a CPU (hf_on_cpu) computes in float32: twice the bytes of bf16
    weights, at the share of float32's matmul rate its forward reaches (HF_CPU_FORWARD_SHARE)."""
    if hf_on_cpu(backend, hw):
        rate = hw.peak_flops["fp32"] * HF_CPU_FORWARD_SHARE
        hw = dataclasses.replace(hw, bytes_s=hw.bytes_s / 2, peak_flops={"bf16": rate})
    windows = max(1, tokens // context)
    seconds = 0.0
    for side in (recipe, None)[:sides]:
        fp = bound.footprint(g, side)
        step = bound.prefill(g, fp, hw, min(EVAL_BATCH, windows), context, "auto", 1)
        seconds += math.ceil(windows / EVAL_BATCH) * step.seconds
    return seconds


def hf_on_cpu(backend: str, hw) -> bool:
    """The hf backend on a host whose float32 matmul rate was probed: a CPU."""
    return backend == "hf" and bool(hw.peak_flops.get("fp32"))


def serve_work(g: Geometry, recipe, settings, hw, gpus: int = 1) -> dict:
    """Per concurrency level: the bound of one decode step per side, and of the whole
    benchmark (every repeat of both sides: prefills and output_len steps per round)."""
    context = settings.input_len + settings.output_len // 2
    sides = {"original": (None, "auto"), "quantized": (recipe, settings.kv_cache_dtype)}
    levels = {}
    for c in settings.concurrency:
        batch = min(c, settings.num_prompts)
        rounds = math.ceil(settings.num_prompts / batch)
        steps, total = {}, 0.0
        for side, (r, kv) in sides.items():
            fp = bound.footprint(g, r)
            step = bound.decode(g, fp, hw, batch, context, kv, gpus).seconds
            prefill = bound.prefill(g, fp, hw, batch, settings.input_len, kv, gpus).seconds
            steps[side] = step
            total += settings.repeats * rounds * (prefill + settings.output_len * step)
        levels[c] = {"step_seconds": steps, "benchmark_seconds": total}
    return levels


def estimate(work_seconds: float, overhead: dict | None, what: str) -> tuple[float, str]:
    """(seconds, how it was derived)."""
    if overhead is None:
        return work_seconds, f"≥ the bound ({what}); no earlier run measured on this host"
    seconds = overhead["seconds"] + work_seconds
    return seconds, (
        f"this host's measured overheads ({overhead['seconds']:.0f} s, {overhead['model']}) "
        f"+ the bound of the work ({work_seconds:.0f} s, {what})"
    )
