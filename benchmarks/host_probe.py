"""This host's roofline probe (pipeline/perf/host.py) quiet and beside a busy process: what a
repeat timed by the wall clock and by its threads' CPU time each say, as ratios to the quiet
figure. A probe that shares the cores (a test worker, a build) must measure the hardware, not
its share of it; and the float32 rate on one thread beside all of them (two vCPUs that are one
core's hyperthreads give one thread nearly the whole core).

    .venv/bin/python benchmarks/host_probe.py [--repeats 5]

Prints, for the float32 matmul (2048², all threads), the 1 GiB sum and copy, and the float32
matmul on one thread: the quiet rate, then under one busy process per core minus one the wall
clock's and CPU time's rates as a ratio to it.
"""

import argparse
import os
import subprocess
import sys
import time

import torch

SIZE = 2**30
MATMUL = 2048


def rates(repeats: int) -> dict[str, tuple[float, float]]:
    """(wall-clock rate, CPU-time rate) of each probe operation."""
    threads = os.cpu_count() or 1
    a = torch.randn(MATMUL, MATMUL)
    x = torch.ones(SIZE // 4)
    y = torch.empty_like(x)
    work = {
        "float32 matmul": (2 * MATMUL**3, lambda: a @ a, threads),
        "1 GiB sum": (SIZE, x.sum, threads),
        "1 GiB copy": (2 * SIZE, lambda: y.copy_(x), threads),
        "float32 matmul, 1 thread": (2 * MATMUL**3, lambda: a @ a, 1),
    }
    found = {}
    for name, (amount, op, n) in work.items():
        torch.set_num_threads(n)
        op()
        walls, cpus = [], []
        for _ in range(repeats):
            start, cpu = time.perf_counter(), time.process_time()
            op()
            walls.append(time.perf_counter() - start)
            cpus.append((time.process_time() - cpu) / n)
        found[name] = (amount / min(walls), amount / min(cpus))
    torch.set_num_threads(threads)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args()
    quiet = rates(opts.repeats)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(max(1, (os.cpu_count() or 1) - 1))]  # fmt: skip
    try:
        time.sleep(1)
        shared = rates(opts.repeats)
    finally:
        for p in busy:
            p.kill()
    print(f"{'operation':<26} {'quiet':>12}  busy: wall  busy: CPU time")
    for name, (wall, _) in quiet.items():
        unit = "GFLOP/s" if "matmul" in name else "GB/s"
        print(f"{name:<26} {wall / 1e9:>6.0f} {unit:<7} {shared[name][0] / wall:>8.2f}×"
              f" {shared[name][1] / wall:>13.2f}×")  # fmt: skip


if __name__ == "__main__":
    main()
