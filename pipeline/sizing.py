"""How large a vLLM engine each side of a comparison needs on this host: tensor-parallel size,
memory utilization and batch, from the capacity planner's arithmetic (pipeline/capacity.py:
one formula for `make plan`, the eval engines and the serve sides).

The original may need more GPUs than the artifact — that is the point of quantizing: Llama-3-70B
in bf16 (141 GB of weights) takes two 80 GB GPUs, its FP8 artifact one. Each side gets the
smallest tensor-parallel size vLLM accepts (heads and KV heads) that holds its weights plus the
KV cache of `users` sequences of `context` tokens; more GPUs than the host has is refused
(exit 4) before any engine starts. On a CPU host the engine is one process, eager (compiling
takes minutes there and buys little).
"""

import re
from dataclasses import asdict, dataclass

from pipeline import capacity
from pipeline.core.devices import Gpu
from pipeline.core.errors import NotOnThisHost
from pipeline.planning import placement

GIB = 2**30
UTILIZATION = placement.UTILIZATION


@dataclass(frozen=True)
class Engine:
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_num_seqs: int
    enforce_eager: bool
    reason: str  # how the size was chosen, for results and cards

    def vllm_kwargs(self) -> dict:
        """What `vllm.LLM(...)` / lm-eval's vllm model take."""
        found = asdict(self)
        found.pop("reason")
        return found

    def describe(self) -> dict:
        return asdict(self)


def gpu_bytes(gpus: list[str]) -> list[int]:
    """Memory of each GPU from environment.gpus()' lines ("NVIDIA H100 80GB HBM3, 81559 MiB")."""
    found = []
    for line in gpus:
        match = re.search(r"([\d.]+)\s*MiB", line)
        if match:
            found.append(int(float(match[1]) * 2**20))
    return found


def engine(
    config: dict,
    weights: int,
    gpus: list[str],
    users: int,
    context: int,
    label: str,
    kv_dtype: str = "auto",
    utilization: float = UTILIZATION,
) -> Engine:
    """The engine for `weights` bytes of `label` serving `users` × `context` tokens."""
    if not gpus:
        return Engine(1, utilization, users, True, "CPU host: one engine, eager")
    sizes = gpu_bytes(gpus) or [capacity.GPUS["H100-80GB"]]
    gpu = min(sizes)
    overhead = int(capacity.OVERHEAD_GIB * GIB)
    scheduled = capacity.scheduled_tokens(gpus[0], gpu)
    row = capacity.plan_row(config, label, weights, kv_dtype, users, context, gpu, utilization,
                            overhead, scheduled, gpus_per_node=len(sizes))  # fmt: skip
    if row.gpus is None or row.pp > 1:  # this host is one node: what it has is the limit
        wide = capacity.plan_row(config, label, weights, kv_dtype, users, context, gpu,
                                 utilization, overhead, scheduled)  # fmt: skip
        need = f"{wide.gpus}" if wide.gpus else f"more than {capacity.MAX_TP}"
        raise NotOnThisHost(
            f"{label}: {weights / GIB:.1f} GiB of weights and {users} × {context:,} tokens of "
            f"KV cache need {need} GPUs of {gpu / GIB:.0f} GiB (tensor parallel); this host "
            f"has {len(sizes)}"
        )
    reason = (
        f"tensor parallel {row.tp}: the fewest of this host's {len(sizes)} × "
        f"{gpu / GIB:.0f} GiB GPUs that hold {weights / GIB:.1f} GiB of weights and {users} × "
        f"{context:,} tokens of KV cache (a size vLLM accepts for the heads)"
    )
    return Engine(row.tp, utilization, users, False, reason)


@dataclass(frozen=True)
class ServeSide:
    key: str  # "original" | "quantized"
    label: str
    weights: int
    kv_dtype: str


def serve_placement(
    config: dict,
    sides: list[ServeSide],
    gpus: list[Gpu],
    users: int,
    context: int,
    tensor_parallel_size: int | None = None,
    utilization: float = UTILIZATION,
    pipeline_parallel_size: int = 1,
    together: bool = True,
) -> placement.Placement:
    """Each side of a paired serve on this process's GPUs: its TP from the planner (or the one
    given for both), then where it runs and with which share (planning/placement.py)."""
    lines = [g.line() for g in gpus]
    needs = []
    for side in sides:
        tp = (
            tensor_parallel_size
            or engine(
                config, side.weights, lines, users, context, side.label, side.kv_dtype, utilization
            ).tensor_parallel_size
        )
        per_gpu = _per_gpu(config, side, gpus, users, context)
        needs.append(placement.Need(side.key, side.label, tp, per_gpu, pipeline_parallel_size))
    return placement.place(needs, gpus, utilization, together)


def _per_gpu(config: dict, side: ServeSide, gpus: list[Gpu], users: int, context: int):
    scheduled = capacity.scheduled_tokens(gpus[0].name, gpus[0].memory_bytes) if gpus else 0
    overhead = int(capacity.OVERHEAD_GIB * GIB)

    def at(tp: int) -> int:
        return capacity.per_gpu_bytes(config, side.weights, side.kv_dtype, users, context, tp,
                                      scheduled, overhead)  # fmt: skip

    return at
