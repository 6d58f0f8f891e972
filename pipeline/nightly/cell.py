"""One nightly cell: one `python -m pipeline run --json` (a crash stays in the cell), its verdict
from the outcome's status classes, its metrics from the results the outcome names. A plain
function of plain data, so a Ray worker can run it as well as the local loop; what it returns is
all the store needs."""

import contextlib
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from pipeline.chain.request import ChainSpec
from pipeline.core import procs, stopping
from pipeline.core.outcome import Outcome
from pipeline.core.paths import REPO
from pipeline.core.runs import Runs
from pipeline.eval.metrics import DRIFT
from pipeline.eval.results import load as eval_results
from pipeline.nightly import envs
from pipeline.nightly.matrix import RECIPES, Cell
from pipeline.nightly.regress import floor_metrics
from pipeline.nightly.store import Metric
from pipeline.serve.results import load as serve_results

# the process groups of the cells this process runs now: stop_running() ends them
_RUNNING: set[int] = set()
STOP_GRACE_S = 60.0  # a stopped cell's time to record its stop and end its vLLM servers


def execute(
    cell: Cell,
    runs: Runs,
    log_dir: str,
    timeout_s: float | None = None,
    env_stamps: dict | None = None,
) -> dict:
    """{model, cell, recipe, overrides_sha, status, error, stages, metrics, where}, its run
    folders under `runs` (its `pipeline run` is handed them as RUNS_DIR). env_stamps: the
    driver's envs (envs.py), checked first where the cell runs on a Ray node."""
    place = where()
    if env_stamps is not None and (why := envs.refusal(env_stamps, place["node"], runs.remote)):
        return {"model": cell.model, "cell": cell.name, "recipe": cell.recipe,
                "overrides_sha": cell.overrides_sha, "status": "failed", "error": why,
                "stages": {}, "metrics": [], "where": place}  # fmt: skip
    runs.pull(RECIPES)  # a worker's mirror: the driver's overridden recipes
    log = Path(log_dir) / log_name(cell)
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        outcome, tail, timed_out = _run(cell, runs, log, timeout_s)
    finally:  # the log where the driver reads it, in object storage too
        if runs.remote and log.parent.is_relative_to(runs.local):
            runs.push(log.parent.relative_to(runs.local).as_posix())
    result = {
        "model": cell.model,
        "cell": cell.name,
        "recipe": cell.recipe,
        "overrides_sha": cell.overrides_sha,
        **verdict(outcome, tail),
    }
    if timed_out:
        result |= {"status": "failed", "error": f"timed out after {timeout_s:g} s: stopped"}
    result["metrics"] = [asdict(m) for m in collect(outcome)]
    result["where"] = place
    result["calibration"] = calibration(outcome)
    return result


def calibration(outcome: Outcome | None) -> dict | None:
    """What the cell's artifact was calibrated on, as its quantize stage recorded it."""
    q = next((s for s in (outcome.stages if outcome else []) if s.stage == "quantize"), None)
    return (q.metrics or {}).get("calibration") if q and q.status in ("done", "cached") else None


def execute_on_node(
    cell: Cell, log_dir: str, timeout_s: float | None, env_stamps: dict | None
) -> dict:
    """A cell as a Ray task: an entry point of its own on its node, its run folders where the
    RUNS_DIR its task was handed says (executors.runtime_env_vars)."""
    stopping.interruptible()  # Ray's cancel must land, however the worker was started
    return execute(cell, Runs.from_env(), log_dir, timeout_s, env_stamps)


def stop_running() -> None:
    """End every cell this process runs now, with everything it started: the driver lost its
    lease (store/leases.py), so its cells are another driver's now, and a survivor would hold their
    run folders' locks against it."""
    for pid in list(_RUNNING):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def log_name(cell: Cell) -> str:
    """The cell's log file in the run's log folder: a model given as a folder or a hub id
    (slashes) is one file name, never a path of its own."""
    model, name = (re.sub(r"[^\w.-]+", "--", x).strip("-") for x in (cell.model, cell.name))
    return f"{model}--{name}.log"


def where() -> dict:
    """The node and the GPUs this cell ran on: Ray's node id and assigned GPUs in a Ray task,
    else this host and CUDA_VISIBLE_DEVICES (None: every GPU the host has, or none)."""
    node = socket.gethostname()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [g for g in visible.split(",") if g] if visible is not None else None
    ray = sys.modules.get("ray")  # imported only where a Ray worker runs this
    if ray is not None and ray.is_initialized():
        context = ray.get_runtime_context()
        node = f"{node}/{context.get_node_id()[:12]}"
        gpus = [str(g) for g in ray.get_gpu_ids()]
    return {"node": node, "gpus": gpus}


def command(cell: Cell) -> tuple[list[str], ChainSpec]:
    """The cell as one `pipeline run`, and the request it reads on stdin: its stages, backend
    and serve settings."""
    python = envs.python() if Path(envs.python()).exists() else sys.executable
    spec = ChainSpec(
        model=cell.model,
        recipe=cell.recipe_arg,
        artifact=cell.artifact,
        stages=tuple(s for s in cell.stages if s != "quantize"),
        backend=cell.eval_backend,  # the matrix checked it: hf | vllm
        serve=dict(cell.serve),
    )
    return [python, "-m", "pipeline", "run", "--request", "-", "--json"], spec


def _run(
    cell: Cell, runs: Runs, log: Path, timeout_s: float | None
) -> tuple[Outcome | None, str, bool]:
    """The outcome the CLI printed (None if it died before printing one), its log's tail, and
    whether it ran past `timeout_s` (then its whole process group is killed: servers too)."""
    cmd, spec = command(cell)
    request = spec.model_dump_json(exclude_defaults=True)
    with open(log, "a") as err:
        err.write(f"\n$ {' '.join(cmd)} <<< '{request}'\n")
        err.flush()
        start = err.tell()
        env = {**os.environ, "RUNS_DIR": runs.setting}
        env["PIPELINE_PARENT_PID"] = str(os.getpid())  # dies with it: procs.py
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            env=env, start_new_session=True,
        )  # fmt: skip
        timed_out = False
        _RUNNING.add(proc.pid)
        try:
            stdout = _communicate(proc, timeout_s, request)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
        except KeyboardInterrupt:  # the driver was stopped (Ctrl-C, SIGTERM, Ray's cancel):
            procs.stop(proc, STOP_GRACE_S)  # the cell stops as a command does, then is ended
            raise
        finally:
            _RUNNING.discard(proc.pid)
        err.write(stdout)
    with open(log, errors="replace") as f:
        f.seek(start)
        tail = f.read()[-4000:]
    lines = [x for x in stdout.splitlines() if x.startswith("{")]
    return (Outcome.model_validate_json(lines[-1]) if lines else None), tail, timed_out


def _communicate(proc: subprocess.Popen, timeout_s: float | None, request: str) -> str:
    """proc.communicate, `request` on its stdin, a second at a time: Ray's cancel stops a task
    by setting Python's interrupt flag (as SIGINT would) without a signal, which a blocked read
    never notices: a cancelled cell used to run to its end. Retried, communicate loses no
    output and goes on writing the input it was first given."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    given: str | None = request
    while True:
        left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0)
        try:
            return proc.communicate(given, timeout=left)[0]
        except subprocess.TimeoutExpired:
            given = None  # handed over once: a retry may not give it again
            continue


def verdict(outcome: Outcome | None, tail: str = "") -> dict:
    """{status, error, stages} of a cell, from the outcome's status classes alone: rewording a
    message never changes a verdict."""
    if outcome is None:
        return {"status": "failed", "error": f"crashed: {_last_line(tail)}", "stages": {}}
    stages, status, error = {}, "ok", None
    for s in outcome.stages:
        if s.status in ("done", "cached"):
            stages[s.stage] = "done"
        elif s.status == "gate_failed":
            stages[s.stage] = "gate_failed"
            status = "gate_failed" if status == "ok" else status
        elif s.status == "unsupported":
            stages[s.stage] = f"skipped: {s.message}"
        else:
            stages[s.stage] = "failed"
            status, error = "failed", f"{s.stage}: {s.message}"
    if not outcome.stages and outcome.exit_code:  # refused before any stage ran
        status, error = "failed", f"{outcome.status}: {outcome.message}"
    return {"status": status, "error": error[:500] if error else None, "stages": stages}


def _last_line(tail: str) -> str:
    lines = [x for x in tail.splitlines() if x.strip()]
    return (lines or ["no output"])[-1].strip()[:500]


def collect(outcome: Outcome | None) -> list:
    """Metrics of the results the cell's run used: quality (with standard errors), memory,
    throughput."""

    by = {s.stage: s for s in (outcome.stages if outcome else [])}
    found = []
    q = by.get("quantize")
    if q and q.status in ("done", "cached"):
        m = q.metrics
        found.append(Metric("checkpoint_bytes", m["tensor_bytes"], None, "lower", "memory"))
        found.append(Metric("ratio_to_bf16", m["ratio_to_bf16"], None, "lower", "memory"))
        if m.get("ratio_to_bf16"):  # the original's 16-bit size: its point on the report's plot
            original = m["tensor_bytes"] / m["ratio_to_bf16"]
            found.append(Metric("original_bytes", original, None, "lower", "memory"))
    ev = by.get("eval")
    if ev and ev.status in ("done", "cached", "gate_failed"):
        results = eval_results(Path(ev.paths["results"]))
        h = results.heldout
        found += [
            Metric(m.key, value, m.se(h), m.direction, "quality")
            for m in DRIFT
            if (value := m.value(h)) is not None  # an older eval's lacks the newer figures
        ]
        for t in results.tasks:
            if t.recovery is not None:
                se = recovery_se(t.original, t.quantized, t.original_stderr, t.quantized_stderr)
                found.append(Metric(f"{t.task}.recovery", t.recovery, se, "higher", "quality"))
        found += floor_metrics(results, Metric)  # noise floors, paired task changes
    sv = by.get("serve")
    if sv and sv.status in ("done", "cached"):
        found += _serving(serve_results(Path(sv.paths["results"])), Metric)
    return found


def _serving(results, Metric) -> list:
    cmp = results.comparison  # paired ratios, unless the cell asked for the cached original
    found = []
    kv = cmp.memory.kv_cache_tokens.ratio
    if kv is not None:
        found.append(Metric("kv_cache_tokens_ratio", kv, None, "higher", "memory"))
    for lv in cmp.levels:
        c, tok = lv.concurrency, lv.output_tok_s
        found.append(Metric(f"c{c}.output_tok_s", tok.quantized, None, "higher", "throughput"))
        found.append(Metric(f"c{c}.original_tok_s", tok.original, None, "higher", "throughput"))
        found.append(
            Metric(f"c{c}.output_tok_s_ratio", tok.ratio, tok.ratio_se, "higher", "throughput")
        )
        ttft = lv.ttft_median_ms
        if ttft.ratio is not None:
            found.append(
                Metric(f"c{c}.ttft_median_ratio", ttft.ratio, ttft.ratio_se, "lower", "throughput")
            )
    for lv in results.cost.levels if results.cost else []:
        c, usd = lv.concurrency, lv.usd_per_million_output_tokens
        found.append(Metric(f"c{c}.usd_per_million", usd.quantized, None, "lower", "cost"))
        found.append(Metric(f"c{c}.original_usd_per_million", usd.original, None, "lower", "cost"))
        if usd.ratio is not None:
            found.append(
                Metric(f"c{c}.usd_per_million_ratio", usd.ratio, usd.ratio_se, "lower", "cost")
            )
    return found


def recovery_se(o: float, q: float, so: float | None, sq: float | None) -> float | None:
    """SE of q / o from the two scores' standard errors (independent samples)."""
    if not o or not q or so is None or sq is None:
        return None
    return (q / o) * math.sqrt((so / o) ** 2 + (sq / q) ** 2)
