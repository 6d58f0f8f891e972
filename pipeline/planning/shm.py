"""The shared memory (/dev/shm) a job of several processes maps, against what the host or
container gives: Docker gives a container 64 MiB unless run with `--ipc=host` (the host's) or
`--shm-size`. Refused in the plan, before anything loads, with the flag that fixes it; a job
that ran out would die of SIGBUS at the first write past the limit (tmpfs maps the files whole
and allocates pages as they are written).

- vLLM on one node at TP × PP > 1 (its multiprocessing executor) maps ring buffers there
  (vllm/distributed/device_communicators/shm_broadcast.py, ShmRingBuffer: max_chunks ×
  (max_chunk_bytes + 1 + readers)): the scheduler's broadcast to every worker (10 chunks of
  VLLM_MQ_MAX_CHUNK_BYTES_MB, 16 MiB), each worker's response queue (MessageQueue's default,
  10 × 24 MiB) and each TP group's broadcaster (6 × 4 MiB). NCCL's own segments are on top
  (smaller; NCCL's docs ask containers for `--shm-size=1g`).
- `quantize --nproc N`: compressed-tensors' DistributedCPUCache moves every offloaded tensor
  into shared memory (`share_memory_()`), the model at its load dtype.
"""

import math
import os
from pathlib import Path

SHM = Path("/dev/shm")
MIB, GIB = 2**20, 2**30


def ring_bytes(readers: int, chunk_bytes: int, chunks: int) -> int:
    """One of vLLM's ShmRingBuffers: its chunks, then a flag byte per chunk for the writer and
    each reader."""
    return chunks * (chunk_bytes + 1 + readers)


def vllm_bytes(tp: int, pp: int = 1) -> int:
    """What vLLM's executor and its workers map in /dev/shm on one node (0 for one process)."""
    world = tp * pp
    if world == 1:
        return 0
    chunk = int(os.environ.get("VLLM_MQ_MAX_CHUNK_BYTES_MB", "16")) * MIB
    broadcast = ring_bytes(world, chunk, 10)
    responses = world * ring_bytes(1, 24 * MIB, 10)
    tp_groups = pp * ring_bytes(tp - 1, 4 * MIB, 6) if tp > 1 else 0
    return broadcast + responses + tp_groups


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
