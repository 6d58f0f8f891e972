"""Run-to-run noise of the serve measurement: the basis of the nightly throughput band.

    .venv/bin/python benchmarks/serve_noise.py [REPEATS] [RECIPE]     (default 3, fp8)

Each repeat measures the original and the quantized model from scratch (a fresh RUNS_DIR, so
nothing is cached) with the nightly's serve settings (evals/nightly.yaml), then prints, per
concurrency level, the quantized / original output tokens/s and TTFT ratios: mean, relative
standard deviation and the largest relative deviation from the mean. The nightly flags a ratio
that got worse by more than `thresholds.throughput_band`; set it above the largest deviation
seen here (noise), on the hardware the nightly runs on.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from pipeline.core.paths import NIGHTLY_MATRIX, REPO


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    recipe = sys.argv[2] if len(sys.argv) > 2 else "fp8"
    serve = yaml.safe_load(NIGHTLY_MATRIX.read_text())["serve"]
    args = ["--concurrency", ",".join(map(str, serve["concurrency"]))]
    args += ["--num-prompts", str(serve["num_prompts"])]
    args += ["--enforce-eager"] if serve.get("enforce_eager") else []
    ratios: dict[tuple[int, str], list[float]] = {}
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as runs:
            env = {**os.environ, "RUNS_DIR": runs}
            cmd = [sys.executable, "-m", "pipeline", "serve", "--recipe", recipe, *args, "--json"]
            done = subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.PIPE)
            outcome = json.loads(done.stdout.splitlines()[-1])
            (serve,) = [s for s in outcome["stages"] if s["stage"] == "serve"]
            results = json.loads(Path(serve["paths"]["results"]).read_text())
        for level in results["comparison"]["levels"]:
            for key in ("output_tok_s", "ttft_median_ms"):
                ratios.setdefault((level["concurrency"], key), []).append(level[key]["ratio"])
        print(f"repeat {i + 1}/{repeats} done", file=sys.stderr, flush=True)
    print(f"{'concurrency':>11} {'ratio of':<16} {'mean':>7} {'rel sd':>7} {'max dev':>8}  values")
    for (c, key), values in sorted(ratios.items()):
        mean = statistics.fmean(values)
        sd = statistics.stdev(values) / mean if len(values) > 1 else 0.0
        dev = max(abs(v - mean) for v in values) / mean
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{c:>11} {key:<16} {mean:>7.3f} {sd:>7.1%} {dev:>8.1%}  {shown}")


if __name__ == "__main__":
    main()
