"""Peak RSS, plan and throughput of `make quantize` at a real model's shapes, per path × recipe,
side by side in one run on one host.

    .venv/bin/python benchmarks/quantize_memory.py [--layers 2] [--gptq] [--workers 2]

The model is pipeline/models/realshape.py's (Llama-3-8B's layer shapes and vocabulary, random
weights, 1 GB shards). Each row is one `python -m pipeline quantize` process with its own
RUNS_DIR: peak RSS as the manifest records it (the process's ru_maxrss) and as
`/usr/bin/time -f %M` sees it, the `--dry-run` plan, their ratio, wall time and params/s.
`--gptq` adds GPTQ W4A16 with 16 × 256 calibration tokens (~10 minutes per layer on 2 cores).
The table of docs/real-size.md comes from here.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from pipeline.core.paths import REPO

GIB = 2**30


def quantize(model: str, recipe: str, extra: list[str]) -> dict:
    env = {**os.environ, "RUNS_DIR": tempfile.mkdtemp(prefix="qmem-")}
    command = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "pipeline", "quantize",
               "--model", model, "--recipe", recipe, "--json", *extra]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{recipe} {extra}: exit {done.returncode}\n{done.stderr[-2000:]}")
    (stage,) = json.loads(done.stdout.strip().splitlines()[-1])["stages"]
    time_kib = int(done.stderr.strip().splitlines()[-1])
    return {**stage["metrics"], "time_peak_bytes": time_kib * 1024, "process_seconds": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--gptq", action="store_true")
    p.add_argument("--workers", type=int, default=2, help="a model-free row with N workers")
    args = p.parse_args()
    from pipeline.models.realshape import ensure

    model = str(ensure("llama3-8b", args.layers))
    largest = max(f.stat().st_size for f in (REPO / model).glob("*.safetensors"))
    rows = [
        ("fp8", ["--path", "model-free"]),
        ("fp8", ["--path", "model-free", "--workers", str(args.workers)]),
        ("fp8", ["--path", "oneshot"]),
    ]
    if args.gptq:
        rows.append(("gptq", ["--num-samples", "16", "--max-seq-length", "256"]))
    print(f"model: {model} (largest shard {largest / GIB:.2f} GiB)")
    print("recipe  path                  peak RSS  /usr/bin/time  planned  ratio   wall  params/s")
    for recipe, extra in rows:
        m = quantize(model, recipe, extra)
        label = m["path"] + (f" ×{extra[-1]} workers" if "--workers" in extra else "")
        peak, seen = m["peak_rss_bytes"] / GIB, m["time_peak_bytes"] / GIB
        print(
            f"{recipe:<7} {label:<21} {peak:6.2f} GiB {seen:9.2f} GiB"
            f" {m['planned_peak_rss_bytes'] / GIB:6.2f} GiB {m['peak_rss_ratio_to_plan']:5.2f}"
            f" {m['process_seconds']:5.0f} s {m['params_per_second'] / 1e6:6.1f}M",
            flush=True,
        )


if __name__ == "__main__":
    main()
