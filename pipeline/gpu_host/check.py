"""`make gpu-check`: the GPU paths in a few minutes on a GPU host — one table, and JSON.

    python -m pipeline.gpu_host.check [--runs DIR] [--json OUT.json] [--only KEY,…] [--cpu]

Each step is the pipeline's own command (`python -m pipeline … --json`, a process each,
RUNS_DIR in a fresh folder), and each row of the table says what it proves: on tiny-llama,
model-free FP8 and GPTQ (oneshot, calibrating on the GPU) quantize and the hf eval of both on
the GPU; a one-layer model of Llama-3-8B's shapes (pipeline/models/realshape.py) built, FP8
quantized and loaded by the hf eval — its weights are random, so its gate verdict is expected to
fail and is not a failure; its drift must be finite; where the serving env exists, the vLLM eval
and a short paired serve on tiny-llama; last, a GPTQ run killed after a layer and resumed into
the uninterrupted run's bytes (pipeline/gpu_host/resume_check.py). A step that fails is a row
(the command's exit and its last line), never a lost table; exit 0 only when every row holds. A
step that cannot run here says why (no serving env, or a torch vLLM cannot run on: an offline
GPU host, see docs/environments.md). Each step runs in a process group of its own, its stages
forked (PIPELINE_STAGE_PROCESS=own); nvidia-smi is read while it runs and after its group is gone: a
step that never used the GPU, or left memory on it, fails its row. Before the steps, where the
bundle's carried wheels are named (--site, `make gpu-bundle`), a row checks them against the
host's own packages, and a row runs the fork guard's negative control.
Refuses with exit 4 where no GPU is visible to this process: it proves nothing on a CPU —
except under --cpu, which runs the same rows on the CPU and says so in each (the bundle's test
on a CPU host: it proves that the bundle installs and its commands run, nothing about a GPU).

GPU_CHECK_COMMAND replaces `python -m` in front of every step's module (the tests run the table
against recorded outcomes with it; a user can wrap the steps, e.g. in `nsys profile python -m`).
"""

import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import devices
from pipeline.core.errors import NotOnThisHost
from pipeline.gpu_host import host_rows
from pipeline.gpu_host.memory_watch import Watch

SMALL_SERVE = ["--concurrency", "1,4", "--num-prompts", "8", "--repeats", "1"]
REAL = "{real}"  # the real-shape model's folder, built by its own row
BUILT = ("done", "cached")


def _finite_drift(stage: dict) -> str | None:
    """A random-weight model's gates may fail; its drift must still be numbers."""
    m = stage.get("metrics") or {}
    bad = [k for k in ("kl_mean", "ppl_ratio", "same_top_pct") if not _finite(m.get(k))]
    return f"drift not finite: {', '.join(bad)}" if bad else None


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


@dataclass(frozen=True)
class Step:
    key: str  # --only's name for it
    label: str
    argv: tuple[str, ...]
    proves: str
    accepts: tuple[str, ...] = BUILT  # the last stage's statuses that hold
    needs_vllm: bool = False
    check: Callable[[dict], str | None] | None = None  # the last stage → why it does not hold


STEPS = (
    Step("fp8", "quantize fp8 (model-free)",
         ("quantize", "--recipe", "fp8", "--path", "model-free"),
         "FP8 written shard by shard with the GPU (compressed-tensors)"),
    Step("gptq", "quantize gptq (oneshot)", ("quantize", "--recipe", "gptq"),
         "GPTQ calibrates on the GPU (llm-compressor oneshot), in a forked process of its own"),
    Step("eval-fp8", "eval hf fp8", ("eval", "--recipe", "fp8", "--backend", "hf"),
         "transformers loads FP8 on the GPU (bf16); drift within the recipe's gates"),
    Step("eval-gptq", "eval hf gptq", ("eval", "--recipe", "gptq", "--backend", "hf"),
         "transformers loads W4A16 on the GPU (bf16); drift within the recipe's gates"),
    Step("8b", "quantize fp8, 8B shapes", ("quantize", "--model", REAL, "--recipe", "fp8"),
         "a real-shape checkpoint (128k vocabulary, 1 GB shards) quantizes on the GPU"),
    Step("8b", "eval hf fp8, 8B shapes",
         ("eval", "--model", REAL, "--recipe", "fp8", "--backend", "hf"),
         "its artifact loads and scores at real shapes; random weights: gates expected to fail, "
         "drift finite", accepts=(*BUILT, "gate_failed"), check=_finite_drift),
    Step("vllm", "eval vllm fp8", ("eval", "--recipe", "fp8", "--backend", "vllm"),
         "vLLM's CUDA build loads the artifact and scores it", needs_vllm=True),
    Step("vllm", "serve fp8 (paired)", ("serve", "--recipe", "fp8", *SMALL_SERVE),
         "both sides served and benchmarked on the GPU, placement as planned", needs_vllm=True),
)  # fmt: skip
KEYS = ("wheels", "fork", *dict.fromkeys(s.key for s in STEPS), "resume")
BUILD_LABEL = "build 8B shapes (1 layer)"
BUILD_PROVES = "a random-init Llama-3-8B-shape model saves as a hub checkpoint"
WHEELS = Step(
    "wheels",
    "carried wheels",
    (),
    "the bundle's wheels install with no index and "
    "import on this host's own torch; every carried package's requirements are met",
)
FORK = Step(
    "fork",
    "fork guard (negative control)",
    (),
    "a parent that already initialised "
    "CUDA (a plain is_available()) is caught: the stage runs in it, not in a poisoned fork",
)
RESUME = Step(
    "resume",
    "quantize gptq killed, resumed",
    (),
    "a GPTQ run killed after its first layer resumes there on the GPU and writes an "
    "uninterrupted run's bytes (pipeline/gpu_host/resume_check.py)",
)
CPU_NOTE = "simulated on the CPU (--cpu): nothing about a GPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, help="RUNS_DIR for the steps (default: a temp one)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    parser.add_argument(
        "--only",
        type=_keys,
        default=KEYS,
        help=f"these rows, by name, comma-separated ({', '.join(KEYS)})",
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=os.environ.get("GPU_BUNDLE_SITE") or None,
        help="where the bundle's wheels were installed (its wheels row)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="run the rows on the CPU, each saying so (a test of the bundle)",
    )
    args = parser.parse_args(argv)
    gpus = devices.seen()
    if args.cpu:
        print(f"gpu-check {CPU_NOTE}")
    elif not gpus:
        said = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={said!r})" if said is not None else ""
        print(f"error: gpu-check: no GPU visible to this process{shown}: nothing to prove on a "
              "CPU; run it on a GPU host", file=sys.stderr)  # fmt: skip
        return NotOnThisHost.exit_code
    runs = args.runs or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    if gpus and not args.cpu:
        print(f"gpu-check on {len(gpus)} × {gpus[0].name} (driver {gpus[0].driver}), runs in "
              f"{runs}")  # fmt: skip
    rows = run_all(runs, Only(args.only, args.site, args.cpu))
    holds = all(r["holds"] is not False for r in rows)
    if args.json:
        table = {"gpus": [] if args.cpu else [g.line() for g in gpus], "steps": rows,
                 "holds": holds, "simulated_on_cpu": args.cpu}  # fmt: skip
        args.json.write_text(json.dumps(table, indent=1))
    held = sum(r["holds"] is True for r in rows)
    skipped = sum(r["holds"] is None for r in rows)
    print(f"{held} of {len(rows)} rows hold, {skipped} skipped, {len(rows) - held - skipped} fail")
    return 0 if holds else 1


def _keys(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if unknown := [k for k in keys if k not in KEYS]:
        raise argparse.ArgumentTypeError(f"no row {', '.join(unknown)}: one of {', '.join(KEYS)}")
    return keys


@dataclass(frozen=True)
class Only:
    keys: tuple[str, ...]
    site: Path | None  # the bundle's installed wheels
    cpu: bool


def run_all(runs: Path, only: Only | None = None) -> list[dict]:
    """Every row, printed as it ends (a step is minutes: the table grows as they finish)."""
    only = only or Only(KEYS, None, False)
    rows, real = _host_rows(only), None
    vllm_blocker = host_rows.vllm_blocker() if "vllm" in only.keys else None
    for step in STEPS:
        if step.key not in only.keys:
            continue
        if REAL in step.argv and real is None:
            real, row = _build_real()
            rows.append(_show(row))
        if REAL in step.argv and not real:
            rows.append(_show(_row(step, None, 0.0, "the 8B-shape build failed", "not run")))
            continue
        if step.needs_vllm and vllm_blocker:
            rows.append(_show(_row(step, None, 0.0, vllm_blocker, "not run")))
            continue
        rows.append(_show(_step(step, runs, real, only.cpu)))
    if "resume" in only.keys:
        rows.append(_show(_resume(runs, only.cpu)))
    return rows


def _host_rows(only: Only) -> list[dict]:
    rows = []
    if "wheels" in only.keys and only.site:
        started = time.monotonic()
        holds, detail = host_rows.carried_wheels(only.site)
        rows.append(_show(_row(WHEELS, holds, time.monotonic() - started, detail, "checked")))
    if "fork" in only.keys:
        if only.cpu:
            rows.append(_show(_row(FORK, None, 0.0, f"{CPU_NOTE}: no CUDA to poison")))
        else:
            started = time.monotonic()
            done = _run("pipeline.gpu_host.fork_guard_check", [], {})
            holds, detail = host_rows.fork_guard(done)
            rows.append(_show(_row(FORK, holds, time.monotonic() - started, detail, "checked")))
    return rows


def _show(row: dict) -> dict:
    mark = {True: "ok", False: "FAIL", None: "skip"}[row["holds"]]
    detail = f" — {row['detail']}" if row["detail"] else ""
    print(f"  {mark:<4} {row['step']:<30} {row['status']:<12} {row['seconds']:>7.1f} s  "
          f"{row['proves']}{detail}", flush=True)  # fmt: skip
    return row


def _row(step: Step, holds: bool | None, seconds: float, detail: str, status: str = "") -> dict:
    status = status or {None: "skipped", False: "not run"}.get(holds, "")
    return {"step": step.label, "proves": step.proves, "status": status, "holds": holds,
            "seconds": round(seconds, 1), "detail": detail}  # fmt: skip


def _step(step: Step, runs: Path, real: str | None, cpu: bool = False) -> dict:
    argv = list(step.argv)
    if REAL in argv:
        if not real:  # run_all skips such a step when the build failed
            raise ValueError(f"{step.label}: needs the 8B-shape model's folder")
        argv = [real if a == REAL else a for a in argv]
    started = time.monotonic()
    with Watch() as watch:
        done = _run("pipeline", [*argv, "--json"],
                    {"RUNS_DIR": str(runs), "PIPELINE_STAGE_PROCESS": "own"})  # fmt: skip
    seconds = time.monotonic() - started
    try:
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return _row(step, False, seconds, _last_line(done), f"exit {done.returncode}")
    last = outcome["stages"][-1] if outcome.get("stages") else {}
    status = last.get("status") or outcome.get("status") or "?"
    why = None if status in step.accepts else (outcome.get("message") or f"exit {done.returncode}")
    why = why or (step.check(last) if step.check else None)
    gpu, gpu_why = _gpu_use(watch, done, cpu)
    why = why or gpu_why
    detail = why or "; ".join(x for x in ((outcome.get("message") if status not in BUILT else ""),
                                          gpu) if x)  # fmt: skip
    return _row(step, why is None, seconds, detail[:200], status)


def _resume(runs: Path, cpu: bool) -> dict:
    """The resume row: its own module kills and re-runs a quantize, and says what it found."""
    started = time.monotonic()
    with Watch() as watch:
        done = _run("pipeline.gpu_host.resume_check", [str(runs)],
                    {"PIPELINE_STAGE_PROCESS": "own"})  # fmt: skip
    seconds = time.monotonic() - started
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return _row(RESUME, False, seconds, _last_line(done), f"exit {done.returncode}")
    gpu, gpu_why = _gpu_use(watch, done, cpu)
    why = found["why"] or gpu_why
    detail = why or f"{found['detail']}; {gpu}"
    return _row(RESUME, why is None, seconds, detail[:200], "resumed" if why is None else "failed")


def _gpu_use(watch: Watch, done: "Done", cpu: bool) -> tuple[str, str | None]:
    """(what the step held on the GPUs, why that fails its row or None)."""
    if cpu:
        return CPU_NOTE, None
    if watch.peak_mib is None:
        return "GPU memory not read (no nvidia-smi answer)", None
    said = f"GPU +{watch.peak_mib} MiB at peak, {watch.left_mib} MiB left after"
    if done.left_behind:
        return said, f"{said}; {done.left_behind} process(es) of the step left running (killed)"
    if not watch.freed:
        return said, f"{said}: memory of ours left on the GPU"
    if watch.peak_mib == 0:
        return said, f"{said}: the step never used the GPU"
    return said, None


def _build_real() -> tuple[str, dict]:
    """(folder or "" when it failed, its row): one decoder layer of Llama-3-8B's shapes and
    vocabulary, in its own process (as a user's checkpoint is made)."""
    step = Step("8b", BUILD_LABEL, (), BUILD_PROVES)
    started = time.monotonic()
    done = _run("pipeline.models.realshape", ["llama3-8b", "--layers", "1"], {})
    seconds = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not Path(lines[-1]).is_dir():
        return "", _row(step, False, seconds, _last_line(done), f"exit {done.returncode}")
    return lines[-1], _row(step, True, seconds, "", "done")


class Done(subprocess.CompletedProcess[str]):
    """A step's process, and how many of its group it left running (then killed)."""

    left_behind: int = 0


def _run(module: str, args: list[str], env: dict) -> Done:
    """The step in a process group of its own; what it leaves running is counted and killed."""
    wrapper = os.environ.get("GPU_CHECK_COMMAND")
    head = shlex.split(wrapper) if wrapper else [sys.executable, "-m"]
    proc = subprocess.Popen([*head, module, *args], env={**os.environ, **env}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    out, err = proc.communicate()
    done = Done(proc.args, proc.returncode, out, err)
    done.left_behind = _end_group(proc.pid)
    return done


def _end_group(pgid: int) -> int:
    """How many processes of the group were still running (then killed)."""
    alive = [p for p in Path("/proc").glob("[0-9]*") if _pgid(p) == pgid]
    if alive:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(alive)


def _pgid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return (lines[-1] if lines else "no output")[:200]


if __name__ == "__main__":
    sys.exit(main())
