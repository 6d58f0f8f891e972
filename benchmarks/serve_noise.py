"""Run-to-run noise of the serve measurement: the basis of the nightly throughput band.

    .venv/bin/python benchmarks/serve_noise.py [REPEATS] [RECIPE]     (default 3, fp8)

Each repeat measures the original and the quantized model from scratch (a fresh RUNS_DIR, so
nothing is cached) with the nightly's serve settings (evals/nightly.yaml): both served at once
and benchmarked alternately, as `make serve` does. It prints, per concurrency level, the
quantized / original output tokens/s and TTFT ratios over the repeats — mean, relative standard
deviation, largest relative deviation from the mean — for two ways of pairing: `paired`, each
serve run's own ratio (runs back to back), and `apart`, repeat i's quantized over repeat i+1's
original (taken minutes apart, as a cached original would be). The nightly flags a ratio that
got worse by more than `thresholds.throughput_band`; set it above the largest deviation of the
paired ratios seen here, on the hardware the nightly runs on.
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
    ratios: dict[tuple[int, str, str], list[float]] = {}
    sides: dict[tuple[int, str], list[tuple[float, float]]] = {}
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
                c, pair = level["concurrency"], level[key]
                ratios.setdefault((c, key, "paired"), []).append(pair["ratio"])
                sides.setdefault((c, key), []).append((pair["original"], pair["quantized"]))
        print(f"repeat {i + 1}/{repeats} done", file=sys.stderr, flush=True)
    for (c, key), pairs in sides.items():  # quantized of one run over the next run's original
        ratios[(c, key, "apart")] = [
            q / pairs[(i + 1) % len(pairs)][0] for i, (_, q) in enumerate(pairs)
        ]
    print(
        f"{'concurrency':>11} {'ratio of':<16} {'pairing':<7} {'mean':>7} {'rel sd':>7} "
        f"{'max dev':>8}  values"
    )
    for (c, key, how), values in sorted(ratios.items()):
        mean = statistics.fmean(values)
        sd = statistics.stdev(values) / mean if len(values) > 1 else 0.0
        dev = max(abs(v - mean) for v in values) / mean
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{c:>11} {key:<16} {how:<7} {mean:>7.3f} {sd:>7.1%} {dev:>8.1%}  {shown}")


if __name__ == "__main__":
    main()
