"""The shared memory (/dev/shm) a job of several processes maps, against what the host or
container gives: Docker gives a container 64 MiB unless run with `--ipc=host` (the host's) or
`--shm-size`. Refused in the plan, before anything loads, with the flag that fixes it; a job
that ran out would die of SIGBUS at the first write past the limit (tmpfs maps the files whole
and allocates pages as they are written).

- the serving engine on one node at TP × PP > 1 maps its ring buffers there (its room's count:
  engines/vllm/shm_rings.py);
- `quantize --nproc N`: compressed-tensors' DistributedCPUCache moves every offloaded tensor
  into shared memory (`share_memory_()`), the model at its load dtype.

The same job maps each shared tensor on its own into every rank: a file of /dev/shm per tensor
(`_share_filename_cpu_`, mapped by `_new_shared_filename_cpu` in the other ranks), one memory
mapping each, against the kernel's per-process cap vm.max_map_count (65,530 by default; a
container has its host's). Measured on 2 CPU ranks (2026-12-07): a rank held ~1,612 mappings
of its own (Python, torch, llm-compressor) + one of torch's /dev/shm files per shared tensor —
the weights, norms, embeddings and rotary buffers, and the scale and zero point GPTQ adds to
each quantized Linear (281 and 557 tensors at 12 and 24 layers: 1,891-1,895 and 2,173-2,175
mappings; tiny-llama's 97 files, exactly, in tests/e2e/quantize/test_distributed.py).
Llama-3-70B shares 1,845 tensors; a mixture of experts shares each expert's: Qwen3-30B-A3B
56,165 (just under the default), DeepSeek-V3 135,455 (over it).
"""

import math
import os
from pathlib import Path

from pipeline.planning.shape import Geometry

SHM = Path("/dev/shm")
MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
MIB, GIB = 2**20, 2**30
BASE_MAPPINGS = 1_612  # a rank's own before the model: measured (above)
QUANTIZATION_PARAMS = 2  # per quantized Linear: its scale and zero point, shared as its weight


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


def shared_tensors(g: Geometry) -> int:
    """Tensors compressed-tensors shares: each Linear's weight and the quantization parameters
    of each but lm_head (which recipes leave in 16 bits), two norms a decoder layer, a router a
    MoE layer, the final norm, the embeddings and the rotary embedding's two buffers (an upper
    bound where a recipe ignores more)."""
    linears = sum(lin.count for lin in g.checkpoint_linears)
    quantized = sum(lin.count for lin in g.checkpoint_linears if lin.name != "lm_head")
    return linears + QUANTIZATION_PARAMS * quantized + 2 * g.layers + g.moe_layers + 4


def mappings_refusal(tensors: int, what: str, path: Path = MAX_MAP_COUNT) -> str | None:
    """One line where each process would map more than the kernel allows, with the setting
    that fixes it; None where it fits (or the host has no such limit to read)."""
    try:
        limit = int(path.read_text())
    except (OSError, ValueError):
        return None
    needed = BASE_MAPPINGS + tensors
    if needed <= limit:
        return None
    room = 2 ** math.ceil(math.log2(needed * 1.25))
    return (
        f"{what} maps {tensors:,} shared tensors into every process, {needed:,} mappings with "
        f"its own, over this host's vm.max_map_count of {limit:,}: raise it on the host "
        f"(sysctl -w vm.max_map_count={room}; a container has the host's), or run one process"
    )
