"""What vLLM maps in /dev/shm on one node at TP × PP > 1 (its multiprocessing executor): ring
buffers (vllm/distributed/device_communicators/shm_broadcast.py, ShmRingBuffer: max_chunks ×
(max_chunk_bytes + 1 + readers)): the scheduler's broadcast to every worker (10 chunks of
VLLM_MQ_MAX_CHUNK_BYTES_MB, 16 MiB), each worker's response queue (MessageQueue's default,
10 × 24 MiB) and each TP group's broadcaster (6 × 4 MiB). NCCL's own segments are on top
(smaller; NCCL's docs ask containers for `--shm-size=1g`). planning/shm.py checks the total
against what the host or container gives."""

import os

from pipeline.planning.shm import MIB


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
