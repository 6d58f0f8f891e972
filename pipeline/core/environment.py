"""Host and library facts recorded with every stage (never secrets: no env vars are copied)."""

import contextlib
import ctypes
import ctypes.util
import gc
import importlib.metadata
import os
import platform
import socket

import psutil

from pipeline.core import devices
from pipeline.core.paths import REPO as repo


def library_versions(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def host() -> dict:
    info = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus(),
    }
    return info


def cpu_model() -> str | None:
    """The CPU's marketing name (Linux), for reports: "measured on …"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def gpus() -> list[str]:
    """The GPUs this process may use (nvidia-smi's list filtered by CUDA_VISIBLE_DEVICES), as
    nvidia-smi's `name, memory MiB` lines, without importing torch; empty on CPU-only hosts."""

    return [g.line() for g in devices.seen()]


def peak_rss_bytes() -> int:
    """This process's peak resident memory since it started, or since reset_peak_rss()."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def reset_peak_rss() -> None:
    """Start a new peak at the current RSS (Linux ≥ 4.0: writing 5 to clear_refs resets the
    high-water mark), so a stage run after another in one process reports its own. What an
    earlier stage freed is handed back to the system first: glibc keeps freed memory in its
    arenas, which an eval before a quantize in one `make compare` left at most of a GB
    (docs/figures.md)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def git_commit() -> dict:
    """{"commit", "dirty"} of this checkout (None outside a git checkout)."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        except OSError:
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status)}
