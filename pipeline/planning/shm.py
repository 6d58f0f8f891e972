"""The shared memory (/dev/shm) a job of several processes maps, against what the host or
container gives: Docker gives a container 64 MiB unless run with `--ipc=host` (the host's) or
`--shm-size`. Refused in the plan, before anything loads, with the flag that fixes it; a job
that ran out would die of SIGBUS at the first write past the limit (tmpfs maps the files whole
and allocates pages as they are written).

- the serving engine on one node at TP × PP > 1 maps its ring buffers there (its room's count:
  engines/vllm/shm_rings.py);
- `quantize --nproc N`: compressed-tensors' DistributedCPUCache moves every offloaded tensor
  into shared memory (`share_memory_()`), the model at its load dtype.
"""

import math
import os
from pathlib import Path

SHM = Path("/dev/shm")
MIB, GIB = 2**20, 2**30


def free_bytes(path: Path = SHM) -> int | None:
    """Bytes free in /dev/shm (None: no such mount, as on macOS)."""
    try:
        found = os.statvfs(path)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def refusal(needed: int, what: str, path: Path = SHM) -> str | None:
    """One line where /dev/shm holds less than `needed` bytes for `what`, with the flag that
    fixes it; None where it fits (or the host has no /dev/shm to check)."""
    free = free_bytes(path)
    if not needed or free is None or free >= needed:
        return None
    size = math.ceil(needed / GIB)
    return (
        f"{what} maps {needed / GIB:.2f} GiB in {path}, which has {free / MIB:.0f} MiB free "
        f"(a container's default is 64 MiB): run the container with --ipc=host or "
        f"--shm-size={size}g"
    )
