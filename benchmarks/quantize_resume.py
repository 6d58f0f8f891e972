"""kill -9 a quantize at a random layer (or shard), run the same command again: does it resume at
the first unfinished one, with every tensor's bytes an uninterrupted run writes, and how much
of the run does resuming save?

    .venv/bin/python benchmarks/quantize_resume.py [--model tiny-llama] [--recipe gptq]
        [--trials 10] [--seed 0] [-- extra quantize flags, e.g. --path model-free]

One uninterrupted run first (its wall time and the stage's own), then per trial: a fresh run
root, the run killed (SIGKILL to its process group) once a random unit is kept (a decoder layer
of any calibration pass, or a shard, not the last), the same command again. Prints per trial
how many units were kept when it was killed, where the re-run said it resumed, the re-run's
stage time over the full run's beside the share of units it had left, and whether the
artifact is byte-identical; then the summary. docs/figures.md's resume figures come from here.
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.core.paths import REPO
from pipeline.core.same_tensors import differences

RESUMED = re.compile(r"resuming at (layer|shard) \d+ of \d+[^(]*\(\d+ done[^)]*\)")


def quantize(args: list[str], runs: Path) -> tuple[subprocess.Popen, float]:
    env = {**os.environ, "RUNS_DIR": str(runs)}
    command = [sys.executable, "-m", "pipeline", "quantize", *args]
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    return proc, time.monotonic()


def finished(args: list[str], runs: Path) -> tuple[float, dict, str]:
    """(wall seconds, the manifest's quantize entry, stderr) of a run to its end."""
    proc, t0 = quantize(args, runs)
    _, err = proc.communicate()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"quantize {' '.join(args)}: exit {proc.returncode}\n{err[-2000:]}")
    (manifest,) = runs.glob("*/*/manifest.json")
    return wall, json.loads(manifest.read_text())["stages"]["quantize"], err


def passes(recipe_name: str) -> int:
    """Calibration passes oneshot makes: one per modifier that needs data (its independent
    pipeline), as llm-compressor builds them."""
    from llmcompressor.recipe import Recipe

    from pipeline.config import recipe

    built = Recipe.from_dict(recipe.load(recipe_name).spec.quantization).modifiers
    return max(1, sum(bool(getattr(m, "requires_calibration_data", False)) for m in built))


def killed_after(
    args: list[str], runs: Path, rng: random.Random, epochs: int
) -> tuple[str, int, int]:
    """Kill a run once a random unit is kept: (unit kind, units kept when killed, in all).
    Layers: `pass p subgraph k` kept = k layers of pass p (subgraph 0: the embeddings), any
    pass; shards: any but the last."""
    proc, _ = quantize(args, runs)
    target = None
    while proc.poll() is None:
        for progress in runs.glob("*/*/artifact.checkpoints/progress.json"):
            try:
                found = json.loads(progress.read_text())
            except (OSError, ValueError):
                continue
            kind, total, done = found.get("kind"), found.get("total"), found.get("done") or {}
            if target is None and total:
                units = total * epochs if kind == "subgraph" else total
                target = rng.randint(2 if kind == "subgraph" else 1, units - 1)
            if target is not None and len(done) >= target:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return kind, len(done), total * epochs if kind == "subgraph" else total
        time.sleep(0.05)
    raise SystemExit("the run finished before it could be killed: too few units to kill it in")


def _units_kept(runs: Path, entry: dict) -> int:
    """How many units the resumed run found kept (all of them, every pass's): from what its
    manifest recorded, as subgraphs or shards."""
    resumed = entry["metrics"].get("resumed") or {}
    return resumed.get("units", 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--recipe", default="gptq")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("extra", nargs="*", help="more quantize flags (after --)")
    opts = parser.parse_args()
    args = ["--model", opts.model, "--recipe", opts.recipe, *opts.extra]
    rng = random.Random(opts.seed)
    with tempfile.TemporaryDirectory() as tmp:
        full_runs = Path(tmp) / "full"
        full_wall, full, _ = finished(args, full_runs)
        full_stage = full["metrics"]["wall_seconds"]
        (artifact,) = full_runs.glob("*/*/artifact")
        what = f"{opts.model} × {opts.recipe} {' '.join(opts.extra)}".strip()
        print(f"{what}: uninterrupted {full_wall:.1f} s (the stage {full_stage:.1f} s)")
        rows, epochs = [], passes(opts.recipe) if "model-free" not in opts.extra else 1
        for trial in range(opts.trials):
            runs = Path(tmp) / f"trial{trial}"
            kind, kept, total = killed_after(args, runs, rng, epochs)
            wall, entry, err = finished(args, runs)
            said = RESUMED.search(err)
            resumed = _units_kept(runs, entry) if said else 0
            (again,) = runs.glob("*/*/artifact")
            same = not differences(artifact, again)
            ratio = entry["metrics"]["wall_seconds"] / full_stage
            left = (total - resumed) / total
            rows.append((same, ratio, left, resumed == kept))
            print(f"  trial {trial + 1}: killed with {kept}/{total} {kind}s kept; "
                  f"{said[0] if said else 'no resume said'}; stage {ratio:.2f}× the full run's "
                  f"({left:.0%} of units left); wall {wall:.1f} s; "
                  f"{'bytes identical' if same else 'BYTES DIFFER'}")  # fmt: skip
            subprocess.run(["rm", "-rf", str(runs)], check=False)
        identical = sum(r[0] for r in rows)
        resumed_where_killed = sum(r[3] for r in rows)
        over = [r[1] - r[2] for r in rows]
        print(f"{identical}/{len(rows)} byte-identical; {resumed_where_killed}/{len(rows)} resumed "
              f"at the first unit not kept; stage time − share of units left: median "
              f"{statistics.median(over):+.2f} [{min(over):+.2f}, {max(over):+.2f}] of the "
              f"full run")  # fmt: skip


if __name__ == "__main__":
    main()
