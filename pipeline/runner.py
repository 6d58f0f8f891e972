"""Runs one stage with the bookkeeping every stage shares: cache check, status, timing, errors.

A stage supplies its inputs (what decides whether cached output is still valid), the outputs
it leaves in the run directory, and a function that does the work and returns metrics.
"""

import time
from collections.abc import Callable

from pipeline import environment
from pipeline.fsutil import sha256_json
from pipeline.rundir import RunDir, now


def run_stage(
    rundir: RunDir,
    header: dict,
    stage: str,
    inputs: dict,
    outputs: dict[str, str],
    work: Callable[[], dict],
    force: bool = False,
) -> tuple[dict, bool]:
    """(manifest entry, was_cached). Raises whatever `work` raises, after recording it."""
    fingerprint = sha256_json(inputs)
    if not force and rundir.is_cached(stage, fingerprint, list(outputs.values())):
        return rundir.stage(stage), True
    entry = {
        "status": "running",
        "started": now(),
        "ended": None,
        "fingerprint": fingerprint,
        "inputs": inputs,
        "metrics": {},
        "outputs": outputs,
        "environment": environment.host(),
    }
    rundir.update(header, stage, entry)
    t0 = time.monotonic()
    try:
        metrics = work()
    except BaseException as e:
        entry.update(status="failed", ended=now(), error=_one_line(e))
        entry["metrics"] = {"wall_seconds": round(time.monotonic() - t0, 2)}
        rundir.update(header, stage, entry)
        raise
    entry.update(status="done", ended=now())
    entry["metrics"] = {"wall_seconds": round(time.monotonic() - t0, 2), **metrics}
    rundir.update(header, stage, entry)
    return entry, False


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:500]


def run_in_rundir(
    job, stage: str, inputs: dict, outputs: dict[str, str], work: Callable[[], dict], force: bool
) -> tuple[dict, bool]:
    """run_stage for a stage after quantize, in the quantize job's run dir, holding its lock."""
    with job.rundir.lock():
        return run_stage(job.rundir, job.header, stage, inputs, outputs, work, force=force)
