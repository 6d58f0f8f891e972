"""The quantize stage's plan as the chain shows it: where it runs, its memory (the planner's,
pipeline/quantize/plan.py), the download and the artifact, and its time — from the newest
earlier quantize on this host and path, as bf16 bytes per second, where one measured a model
large enough for its rate to scale (a tiny model's run is start-up, not throughput)."""

import json
from pathlib import Path
from typing import Protocol

from pipeline.artifact import Artifact
from pipeline.config.engine_name import ENGINE
from pipeline.core import environment
from pipeline.core.stage_plan import ArtifactPlan
from pipeline.perf import timing
from pipeline.planning import shm


class Quantizing(Artifact, Protocol):
    """What this plan reads of the quantize stage: an artifact made along a path."""

    # read-only: the stage's properties; `calibration` (Artifact's): samples 0 when data-free
    @property
    def path(self) -> str: ...  # "model-free", "oneshot", … (its own rate on this host)

    @property
    def nproc(self) -> int: ...  # processes under torchrun


SCALES_FROM = 2**30  # bf16 bytes a measured run must have quantized for its rate to scale


def plan(q: "Quantizing") -> ArtifactPlan:
    original = q.geometry.original_bytes
    built = q.plan()
    memory = built.get("memory_bytes") or {}
    artifact = memory.get("artifact_estimate", 0)
    downloads = [("original (hub cache)", original)] if q.ref.from_hub else []
    if q.recipe.online:
        return ArtifactPlan(
            path=q.path,
            where=f"nothing to quantize ahead (online: {ENGINE} quantizes as it loads)",
            files=downloads,
            time_seconds=0.0,
            time="nothing to quantize ahead (online)",
        )
    found = ArtifactPlan(
        path=q.path,
        where=built.get("placement", "nothing to quantize"),
        cpu_ram_bytes=memory.get("cpu_ram_peak_estimate", 0),
        device_bytes=memory.get("device_peak_estimate", 0),
        files=[*downloads, ("artifact", artifact), *_checkpoints(q, original)],
        artifact_bytes=artifact,
    )
    samples = q.calibration.num_samples if (built.get("calibration") or {}).get("samples") else 0
    found.time_seconds, found.time = _time(q, original, samples)
    if why := q.host_fit(q.max_memory):
        found.refusals.append(why)
    shared = original if q.nproc > 1 else 0  # each offloaded tensor in shared memory
    what = f"--nproc {q.nproc} (compressed-tensors' shared offload)"
    if why := shm.refusal(shared, what):
        found.refusals.append(why)
    if q.nproc > 1 and (why := shm.mappings_refusal(shm.shared_tensors(q.geometry), what)):
        found.refusals.append(why)
    return found


def _checkpoints(q: "Quantizing", original: int) -> list[tuple[str, int]]:
    """A calibrating run keeps each finished layer until its artifact is in place
    (layer_checkpoints.py): up to the model at its calibration precision, float32 where no GPU
    calibrates it. The model-free path's kept shards are second names of the artifact's."""
    if q.path == "model-free" or not q.calibration.num_samples:
        return []
    upcast = 1 if environment.gpus() else 4 // max(1, _dtype_bytes(q.geometry.dtype))
    return [("layer checkpoints (until the artifact is in place)", original * upcast)]


def _dtype_bytes(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 2)


def _time(q: "Quantizing", original: int, samples: int) -> tuple[float | None, str]:
    """From the newest earlier run on this host with the same path and modifiers: bf16 bytes
    per second, scaled by the calibration samples (a layer's calibration is a pass over each)
    and by the processes, then and now (each rank calibrates its share and solves its share).
    Another algorithm's rate is no estimate: AutoRound's 200 tuning steps a layer took over
    100× the time GPTQ's rate gave it on SmolLM2."""
    # (ended, bf16 bytes per second, run dir) of each earlier run
    rates: list[tuple[str, float, Path]] = []
    small: list[tuple[str, float, Path]] = []
    host = environment.host()["hostname"]
    modifiers = [name for name, _ in q.recipe.modifiers()]
    for path in q.rundir.runs.local.glob("*/*/manifest.json"):
        try:
            entry = json.loads(path.read_text())["stages"]["quantize"]
        except (OSError, ValueError, KeyError):
            continue
        m = entry.get("metrics") or {}
        same_host = (entry.get("environment") or {}).get("hostname") == host
        if not (same_host and m.get("path") == q.path and m.get("bytes_per_second")):
            continue
        if m.get("modifiers") != modifiers:
            continue
        # samples asked, then and now: a source holding fewer gives both runs the same cap
        cal = m.get("calibration") or {}
        asked = cal.get("requested_samples") or m.get("calibration_samples")
        rate = m["bytes_per_second"] * (asked or 1) / (samples or 1)
        # the ranks split the samples and each layer's solves: an ideal split, as planned
        rate *= q.nproc / (m.get("processes") or 1)
        run = (entry.get("ended") or "", rate, path.parent)
        scales = m.get("bf16_bytes", 0) >= min(original, SCALES_FROM) / 2
        (rates if scales else small).append(run)
    if not rates:
        why = f"unknown: no {'+'.join(modifiers)} quantize on this path measured on this host yet"
        if small:
            why = (
                f"unknown: only models too small for their rate to scale were quantized on this "
                f"path here (newest: {max(small)[2]}, start-up more than throughput)"
            )
        return None, why
    _, rate, where = max(rates)
    seconds = original / rate
    per = f" at {samples} samples asked" if samples else ""
    per += f", split over {q.nproc} processes" if q.nproc > 1 else ""
    mib_s = rate / 2**20
    shown = f"{mib_s:,.0f}" if mib_s >= 10 else f"{mib_s:.2g}"
    measured = f"{shown} MiB/s of bf16 weights{per}, from {where}"
    how = f"~{timing.duration(seconds)} (measured: {measured})"
    return seconds, how
