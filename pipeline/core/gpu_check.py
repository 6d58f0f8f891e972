"""`make gpu-check`: the GPU paths in a few minutes on a GPU host — one table, and JSON.

    python -m pipeline.core.gpu_check [--runs DIR] [--json OUT.json]

Each step is the pipeline's own command (`python -m pipeline … --json`, a process each,
RUNS_DIR in a fresh folder), and each row of the table says what it proves: on tiny-llama,
model-free FP8 and GPTQ (oneshot, calibrating on the GPU) quantize and the hf eval of both on
the GPU; a one-layer model of Llama-3-8B's shapes (pipeline/models/realshape.py) built, FP8
quantized and loaded by the hf eval — its weights are random, so its gate verdict is expected to
fail and is not a failure; its drift must be finite; where the serving env exists, the vLLM eval
and a short paired serve on tiny-llama. A step that fails is a row (the command's exit and its
last line), never a lost table; exit 0 only when every row holds. A step that cannot run here
says why (no serving env: a bare GPU machine, see docs/environments.md). Refuses with exit 4
where no GPU is visible to this process: it proves nothing on a CPU.

GPU_CHECK_COMMAND replaces `python -m` in front of every step's module (the tests run the table
against recorded outcomes with it; a user can wrap the steps, e.g. in `nsys profile python -m`).
"""

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import devices, serving_env
from pipeline.core.errors import NotOnThisHost

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
    label: str
    argv: tuple[str, ...]
    proves: str
    accepts: tuple[str, ...] = BUILT  # the last stage's statuses that hold
    needs_vllm: bool = False
    check: Callable[[dict], str | None] | None = None  # the last stage → why it does not hold


STEPS = (
    Step("quantize fp8 (model-free)", ("quantize", "--recipe", "fp8", "--path", "model-free"),
         "FP8 written shard by shard with the GPU (compressed-tensors)"),
    Step("quantize gptq (oneshot)", ("quantize", "--recipe", "gptq"),
         "GPTQ calibrates on the GPU (llm-compressor oneshot)"),
    Step("eval hf fp8", ("eval", "--recipe", "fp8", "--backend", "hf"),
         "transformers loads FP8 on the GPU; drift within the recipe's gates"),
    Step("eval hf gptq", ("eval", "--recipe", "gptq", "--backend", "hf"),
         "transformers loads W4A16 on the GPU; drift within the recipe's gates"),
    Step("quantize fp8, 8B shapes", ("quantize", "--model", REAL, "--recipe", "fp8"),
         "a real-shape checkpoint (128k vocabulary, 1 GB shards) quantizes on the GPU"),
    Step("eval hf fp8, 8B shapes", ("eval", "--model", REAL, "--recipe", "fp8", "--backend", "hf"),
         "its artifact loads and scores at real shapes; random weights: gates expected to fail, "
         "drift finite", accepts=(*BUILT, "gate_failed"), check=_finite_drift),
    Step("eval vllm fp8", ("eval", "--recipe", "fp8", "--backend", "vllm"),
         "vLLM's CUDA build loads the artifact and scores it", needs_vllm=True),
    Step("serve fp8 (paired)", ("serve", "--recipe", "fp8", *SMALL_SERVE),
         "both sides served and benchmarked on the GPU, placement as planned", needs_vllm=True),
)  # fmt: skip
BUILD_LABEL = "build 8B shapes (1 layer)"
BUILD_PROVES = "a random-init Llama-3-8B-shape model saves as a hub checkpoint"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, help="RUNS_DIR for the steps (default: a temp one)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    args = parser.parse_args(argv)
    gpus = devices.seen()
    if not gpus:
        said = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={said!r})" if said is not None else ""
        print(f"error: gpu-check: no GPU visible to this process{shown}: nothing to prove on a "
              "CPU; run it on a GPU host", file=sys.stderr)  # fmt: skip
        return NotOnThisHost.exit_code
    runs = args.runs or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    print(f"gpu-check on {len(gpus)} × {gpus[0].name} (driver {gpus[0].driver}), runs in {runs}")
    rows = run_all(runs)
    holds = all(r["holds"] is not False for r in rows)
    if args.json:
        table = {"gpus": [g.line() for g in gpus], "steps": rows, "holds": holds}
        args.json.write_text(json.dumps(table, indent=1))
    held = sum(r["holds"] is True for r in rows)
    skipped = sum(r["holds"] is None for r in rows)
    print(f"{held} of {len(rows)} rows hold, {skipped} skipped, {len(rows) - held - skipped} fail")
    return 0 if holds else 1


def run_all(runs: Path) -> list[dict]:
    """Every row, printed as it ends (a step is minutes: the table grows as they finish)."""
    rows, real = [], None
    for step in STEPS:
        if REAL in step.argv and real is None:
            real, row = _build_real()
            rows.append(_show(row))
        if REAL in step.argv and not real:
            rows.append(_show(_row(step, None, 0.0, "the 8B-shape build failed", "not run")))
            continue
        rows.append(_show(_step(step, runs, real)))
    return rows


def _show(row: dict) -> dict:
    mark = {True: "ok", False: "FAIL", None: "skip"}[row["holds"]]
    detail = f" — {row['detail']}" if row["detail"] else ""
    print(f"  {mark:<4} {row['step']:<26} {row['status']:<12} {row['seconds']:>7.1f} s  "
          f"{row['proves']}{detail}", flush=True)  # fmt: skip
    return row


def _row(step: Step, holds: bool | None, seconds: float, detail: str, status: str = "") -> dict:
    status = status or {None: "skipped", False: "not run"}.get(holds, "")
    return {"step": step.label, "proves": step.proves, "status": status, "holds": holds,
            "seconds": round(seconds, 1), "detail": detail}  # fmt: skip


def _step(step: Step, runs: Path, real: str | None) -> dict:
    if step.needs_vllm and not serving_env.available():
        return _row(step, None, 0.0, "no serving env (vLLM) here: make setup builds it")
    argv = [real if a == REAL else a for a in step.argv]
    started = time.monotonic()
    done = _run("pipeline", [*argv, "--json"], {"RUNS_DIR": str(runs)})
    seconds = time.monotonic() - started
    try:
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return _row(step, False, seconds, _last_line(done), f"exit {done.returncode}")
    last = outcome["stages"][-1] if outcome.get("stages") else {}
    status = last.get("status") or outcome.get("status") or "?"
    why = None if status in step.accepts else (outcome.get("message") or f"exit {done.returncode}")
    why = why or (step.check(last) if step.check else None)
    detail = why or (outcome.get("message") if status not in BUILT else "") or ""
    return _row(step, why is None, seconds, detail[:200], status)


def _build_real() -> tuple[str, dict]:
    """(folder or "" when it failed, its row): one decoder layer of Llama-3-8B's shapes and
    vocabulary, in its own process (as a user's checkpoint is made)."""
    step = Step(BUILD_LABEL, (), BUILD_PROVES)
    started = time.monotonic()
    done = _run("pipeline.models.realshape", ["llama3-8b", "--layers", "1"], {})
    seconds = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not Path(lines[-1]).is_dir():
        return "", _row(step, False, seconds, _last_line(done), f"exit {done.returncode}")
    return lines[-1], _row(step, True, seconds, "", "done")


def _run(module: str, args: list[str], env: dict) -> subprocess.CompletedProcess:
    wrapper = os.environ.get("GPU_CHECK_COMMAND")
    head = shlex.split(wrapper) if wrapper else [sys.executable, "-m"]
    return subprocess.run([*head, module, *args], env={**os.environ, **env},
                          capture_output=True, text=True)  # fmt: skip


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return (lines[-1] if lines else "no output")[:200]


if __name__ == "__main__":
    sys.exit(main())
