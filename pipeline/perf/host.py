"""This host's own roofline: its memory bandwidth and matmul rate, measured once and cached.

What vLLM's CPU engine can at best do here is the same bound as on a GPU (pipeline/perf/
bound.py) with these rates: bandwidth is the best of reading and of copying a 1 GiB tensor on
every core; the matmul rate that of the faster of bf16 and float32 (the CPU engine's kernels
may upcast) on 2048-square products. Best of a few repeats each: a bound is what the hardware
reaches, not a mean. A repeat is timed by the CPU time its threads got, over the threads: a
probe sharing the cores with another process (a test worker, a build) measures what the
hardware does, not its share of it (benchmarks/host_probe.py measures both beside a busy
process: docs/figures.md).
"""

import json
import os
import time

from pipeline.core import environment
from pipeline.core.files import sha256_text, write_json_atomic
from pipeline.core.paths import cache_root
from pipeline.planning import gpus
from pipeline.planning.gpus import Hardware

REPEATS = 5
SIZE = 2**30  # bytes streamed per bandwidth repeat: well past any CPU cache
MATMUL = 2048
PROBE = "cpu-time, one thread too"  # what the probe measures: older rates are probed again


def hardware(measure: bool = True) -> Hardware | None:
    """This host as Hardware, from the cached measurement (measured on first use: ~10 s; with
    measure=False, None until something measured it: a plan imports no torch)."""
    rates = measured() if measure or _path().is_file() else None
    if rates is None:
        return None
    return Hardware(
        name=f"this host ({rates['cpu_model']}, {rates['threads']} threads)",
        memory_bytes=rates["memory_bytes"],
        bytes_s=rates["bytes_s"],
        # fp32: absent from rates measured before it was (the eval bound then uses bf16's)
        peak_flops={
            "bf16": rates["flops_s"],
            "fp32": rates.get("flops_s_float32"),
            "fp32_thread": rates.get("flops_s_float32_thread"),
        },  # fmt: skip
        link_bytes_s=0.0,
        source=f"measured {rates['measured']} (pipeline/perf/host.py)",
    )


def _path():
    info = environment.host()
    made = f"{info['hostname']} {info['cpu_model']} {os.cpu_count()} {PROBE}"
    key = sha256_text(made)[:12]
    return cache_root() / f"host-rates-{key}.json"


def measured() -> dict:
    path = _path()
    if path.is_file():
        return json.loads(path.read_text())
    info = environment.host()
    rates = {
        **_measure(),
        "cpu_model": info["cpu_model"],
        "memory_bytes": info["memory_bytes"],
        "measured": time.strftime("%Y-%m-%d"),
    }
    write_json_atomic(path, rates)
    return rates


def threads() -> tuple[int, int]:
    """(the threads a torch process started from here computes on, those the rates were probed
    with): OMP_NUM_THREADS where set (torch reads it at start-up), else every CPU, as probed."""
    probed = os.cpu_count() or 1
    if _path().is_file():
        probed = json.loads(_path().read_text()).get("threads", probed)
    setting = os.environ.get("OMP_NUM_THREADS", "")
    used = int(setting) if setting.isdigit() and int(setting) > 0 else probed
    return min(used, probed), probed


def float32_rate(hw: Hardware, used: int, probed: int) -> float:
    """The float32 matmul rate on `used` of the probe's threads: its one-thread rate times the
    threads, up to the all-threads rate. Not a share of the all-threads rate: two vCPUs are
    often one core's two hyperthreads, which share its FMA units, and one thread alone then
    gets nearly all of the core (without a one-thread probe: that share)."""
    whole, one = hw.peak_flops["fp32"], hw.peak_flops.get("fp32_thread")
    if used >= probed:
        return whole
    return min(whole, one * used) if one else whole * used / probed


def _measure() -> dict:
    import torch

    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    # a small probe picks the faster dtype: without AVX-512 BF16 / AMX a bf16 matmul runs
    # ~100x slower than float32, and measuring it at full size would take minutes
    probe = {dtype: _matmul_rate(torch, dtype, 256) for dtype in (torch.bfloat16, torch.float32)}
    fastest = max(probe, key=probe.__getitem__)
    flops = _matmul_rate(torch, fastest, MATMUL)
    # the hf eval computes in float32 on CPUs: with AMX, bf16 runs ~5x faster than that
    fp32 = flops if fastest is torch.float32 else _matmul_rate(torch, torch.float32, MATMUL)
    torch.set_num_threads(1)  # a test worker's process computes on one (float32_rate)
    fp32_thread = _matmul_rate(torch, torch.float32, MATMUL)
    torch.set_num_threads(threads)
    return {"bytes_s": _bandwidth(torch), "flops_s": flops, "threads": threads,
            "matmul_dtype": str(fastest).removeprefix("torch."),
            "flops_s_float32": fp32, "flops_s_float32_thread": fp32_thread}  # fmt: skip


def _matmul_rate(torch, dtype, n: int) -> float:
    a = torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / _best(lambda: a @ a)


def _bandwidth(torch) -> float:
    x = torch.ones(SIZE // 4, dtype=torch.float32)
    y = torch.empty_like(x)
    read = SIZE / _best(x.sum)
    copy = 2 * SIZE / _best(lambda: y.copy_(x))
    return max(read, copy)


def _best(work) -> float:
    """The fastest repeat: its wall time, or its CPU time over the threads computing it where
    the scheduler gave them less than the wall (another process on the cores)."""
    import torch

    work()  # warm: page faults, thread pool start
    threads = torch.get_num_threads()
    times = []
    for _ in range(REPEATS):
        start, cpu = time.perf_counter(), time.process_time()
        work()
        wall, busy = time.perf_counter() - start, time.process_time() - cpu
        times.append(min(wall, busy / threads))
    return min(times)


def here(measure: bool = True) -> Hardware | None:
    """What this host computes on: its first GPU's spec (None: a GPU not in the table), or its
    CPU with the measured rates."""

    found = environment.gpus()
    if found:
        return gpus.match(found[0])
    return hardware(measure)
