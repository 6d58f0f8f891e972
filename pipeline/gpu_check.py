"""`make gpu-check`: the GPU paths in a few minutes on a GPU host — one table, and JSON.

    python -m pipeline.gpu_check [--runs DIR] [--json OUT.json]

Each step is the pipeline's own command (`python -m pipeline … --json`, a process each,
RUNS_DIR in a fresh folder): on tiny-llama, model-free FP8 and GPTQ (oneshot, calibrating on
the GPU) quantize and the hf eval of both on the GPU; on a one-layer model of Llama-3-8B's
shapes (pipeline/models/realshape.py), FP8 quantize and its hf eval; where the serving env
exists, the vLLM eval and a short paired serve on tiny-llama. A step that cannot run says why
(no serving env: a bare GPU machine, see docs/environments.md, "On a bare GPU machine").
Refuses with exit 4 where no GPU is visible to this process: it proves nothing on a CPU.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.core import devices
from pipeline.core.errors import NotOnThisHost

SMALL_SERVE = ["--concurrency", "1,4", "--num-prompts", "8", "--repeats", "1"]
REAL = "{real}"  # the real-shape model's folder, built by the first step that names it
STEPS = (
    ("quantize fp8 (model-free)", ["quantize", "--recipe", "fp8", "--path", "model-free"], False),
    ("quantize gptq (oneshot)", ["quantize", "--recipe", "gptq"], False),  # tiny's capped samples
    ("eval hf fp8", ["eval", "--recipe", "fp8", "--backend", "hf"], False),
    ("eval hf gptq", ["eval", "--recipe", "gptq", "--backend", "hf"], False),
    ("quantize fp8, 8B shapes", ["quantize", "--model", REAL, "--recipe", "fp8"], False),
    ("eval hf fp8, 8B shapes", ["eval", "--model", REAL, "--recipe", "fp8", "--backend", "hf"],
     False),
    ("eval vllm fp8", ["eval", "--recipe", "fp8", "--backend", "vllm"], True),
    ("serve fp8 (paired)", ["serve", "--recipe", "fp8", *SMALL_SERVE], True),
)  # fmt: skip


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
    real: list[str] = []  # built once, when a step first needs it
    rows = [_step(label, argv, needs_vllm, runs, real) for label, argv, needs_vllm in STEPS]
    print(f"gpu-check on {len(gpus)} × {gpus[0].name} (driver {gpus[0].driver}), runs in {runs}")
    for r in rows:
        print(f"  {r['step']:<28} {r['status']:<12} {r['seconds']:>7.1f} s  {r['detail']}")
    if args.json:
        args.json.write_text(json.dumps({"gpus": [g.line() for g in gpus], "steps": rows}))
    return 0 if all(r["status"] in ("done", "cached", "skipped") for r in rows) else 1


def _step(label: str, argv: list[str], needs_vllm: bool, runs: Path, real: list[str]) -> dict:
    from pipeline import serving_env

    if needs_vllm and not serving_env.available():
        return {"step": label, "status": "skipped", "seconds": 0.0,
                "detail": "no serving env (vLLM) here: make setup builds it"}  # fmt: skip
    started = time.monotonic()
    if REAL in argv:
        if not real:
            real.append(_real_shape())
        argv = [real[0] if a == REAL else a for a in argv]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *argv, "--json"],
        env={**os.environ, "RUNS_DIR": str(runs)},
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    try:
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"step": label, "status": f"exit {done.returncode}", "seconds": seconds,
                "detail": tail[0][:200]}  # fmt: skip
    last = outcome["stages"][-1] if outcome.get("stages") else {}
    return {"step": label, "status": last.get("status", outcome.get("status")),
            "seconds": seconds, "detail": (outcome.get("message") or "")[:200]}  # fmt: skip


def _real_shape() -> str:
    """One decoder layer of Llama-3-8B's shapes and vocabulary, in its own process (as a user's
    checkpoint is made); its folder."""
    cmd = [sys.executable, "-m", "pipeline.models.realshape", "llama3-8b", "--layers", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    sys.exit(main())
