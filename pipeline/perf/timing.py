"""Time estimates for the chain's plan: this host's measured overheads + the roofline bound.

A stage's wall time splits into what does not grow with the model — imports, tokenizing, engine
start-up, per-step scheduling — and the work, which does (FLOPs and bytes: this host's roofline,
pipeline/perf/host.py, or a GPU's). Each finished eval and serve records its overheads here
(its wall time minus its own bound); the plan adds the next run's bound to the newest of them.
Without an earlier run on this host the estimate is the bound alone, said to be a lower bound.
lm-eval tasks are added as measured (their time grows with the model: a floor).
"""

import json

from pipeline.core import environment
from pipeline.core.files import sha256_text, write_json_atomic
from pipeline.core.paths import cache_root


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


def estimate(work_seconds: float, overhead: dict | None, what: str) -> tuple[float, str]:
    """(seconds, how it was derived)."""
    if overhead is None:
        return work_seconds, f"≥ the bound ({what}); no earlier run measured on this host"
    seconds = overhead["seconds"] + work_seconds
    return seconds, (
        f"this host's measured overheads ({overhead['seconds']:.0f} s, {overhead['model']}) "
        f"+ the bound of the work ({work_seconds:.0f} s, {what})"
    )


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
