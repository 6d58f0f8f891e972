"""The resident memory of a vLLM server and the engine processes it started, as the kernel
counts it: the proportional set size (PSS), so pages the processes share (the forked engine,
mapped libraries) are counted once, not once per process as RSS sums would. On CPU hosts this is
the memory the model costs; on GPUs it is the host side only (the device's is in the log)."""

import contextlib

import psutil


def tree_pss_bytes(pid: int) -> int | None:
    """PSS of the process and all its descendants; RSS where PSS cannot be read."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            info = proc.memory_full_info()
            total += getattr(info, "pss", None) or info.rss
    return total or None
