"""How long `make run` takes on this host: cold on a fresh run root (the envs and tiny-llama
already built, as after `make setup`), then each stage re-run warm (all cached).

    .venv/bin/python benchmarks/run_time.py [RECIPE] [WARM_REPEATS]     (default fp8, 3)

Prints the cold run's wall time and each stage's share (from the outcome), then the median
(and range) wall time of a warm `quantize`, `eval`, `serve` and `run` command. docs/guide/serve.md's
figures come from here.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from pipeline.core.paths import REPO


def timed(args: list[str], env: dict) -> tuple[float, dict | None]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args, "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seconds = time.monotonic() - start
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}")
    return seconds, json.loads(lines[-1]) if lines else None


def main() -> None:
    recipe = sys.argv[1] if len(sys.argv) > 1 else "fp8"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as runs:
        env = {**os.environ, "RUNS_DIR": runs}
        cold, outcome = timed(["run", "--recipe", recipe], env)
        print(f"cold `make run RECIPE={recipe}` on a fresh run root: {cold:.1f} s")
        for stage in (outcome or {}).get("stages", []):
            seconds = stage.get("seconds")
            shown = f"{seconds:.1f} s" if seconds is not None else "?"
            print(f"  {stage['stage']:<9} {stage['status']:<8} {shown}")
        print(f"warm re-runs (all cached), median of {repeats} [range]:")
        for command in ("quantize", "eval", "serve", "run"):
            times = [timed([command, "--recipe", recipe], env)[0] for _ in range(repeats)]
            print(
                f"  {command:<9} {statistics.median(times):.2f} s "
                f"[{min(times):.2f}–{max(times):.2f}]"
            )


if __name__ == "__main__":
    main()
