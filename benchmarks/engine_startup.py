"""A CPU host's vLLM server with the model in the engine process (what `make serve` launches
there: VLLM_ENABLE_V1_MULTIPROCESSING=0, pipeline/engines/vllm/server.py) against vLLM's default (a
third process, its worker, importing vLLM again): seconds to healthy and decode tokens/s.

    .venv/bin/python benchmarks/engine_startup.py [REPEATS]     (default 3)

tiny-llama, the pipeline's own launch line (no torch.compile), the two ways in turn REPEATS
times; decode: 8 requests one after another of 32 tokens each (EOS ignored). Prints each way's
median and range, and the ratios in-process ÷ default per repeat, with their range.
"""

import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from pipeline.config.recipe import ServeSettings
from pipeline.core import procs
from pipeline.engines import server
from pipeline.models.tiny.build import ensure

WAYS = {"in the engine process": "0", "vLLM's default (a worker process)": "1"}
REQUESTS, TOKENS = 8, 32


def once(model: Path, multiprocessing: str, log: Path) -> tuple[float, float]:
    """(seconds to healthy, decode tokens/s) of one server start."""
    import os

    settings = ServeSettings(enforce_eager=True)
    launch = server.launch(model, "tiny", settings, server.free_port(), 512)
    port = launch.argv[launch.argv.index("--port") + 1]
    env = {**os.environ, **launch.env, "VLLM_ENABLE_V1_MULTIPROCESSING": multiprocessing}
    started = time.monotonic()
    with procs.group(launch.argv, log, env) as proc:
        while server.get(f"http://127.0.0.1:{port}/health", timeout=2) is None:
            if proc.poll() is not None:
                raise SystemExit(procs.tail(log, 30))
            time.sleep(0.2)
        healthy = time.monotonic() - started
        body = {"model": "tiny", "prompt": "def f", "max_tokens": TOKENS, "ignore_eos": True}
        began = time.monotonic()
        for _ in range(REQUESTS):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                {"Content-Type": "application/json"},
            )  # fmt: skip
            urllib.request.urlopen(request, timeout=120).read()
        rate = REQUESTS * TOKENS / (time.monotonic() - began)
    return healthy, rate


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    model = ensure()
    got: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for way, value in WAYS.items():
                got[way].append(once(model, value, Path(tmp, f"{value}-{i}.log")))
                print(f"repeat {i + 1}/{repeats}, {way}: healthy {got[way][-1][0]:.1f} s, "
                      f"{got[way][-1][1]:.0f} tok/s", file=sys.stderr, flush=True)  # fmt: skip
    for way, runs in got.items():
        up, rate = [r[0] for r in runs], [r[1] for r in runs]
        print(f"{way:<34} healthy {statistics.median(up):5.1f} s ({min(up):.1f}–{max(up):.1f}), "
              f"decode {statistics.median(rate):4.0f} tok/s "
              f"({min(rate):.0f}–{max(rate):.0f})")  # fmt: skip
    mine, theirs = got.values()
    for what, k in (("healthy", 0), ("decode tok/s", 1)):
        ratios = [a[k] / b[k] for a, b in zip(mine, theirs, strict=True)]
        print(f"in-process ÷ default, {what}: {statistics.median(ratios):.2f}× "
              f"({min(ratios):.2f}–{max(ratios):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
