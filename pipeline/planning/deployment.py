"""How one model is deployed on GPUs — tensor parallel within a node, pipeline stages across
nodes, the executor, how many users it holds, and why — decided here, once: `make plan`,
`make advise`, the chain plan, the eval and serve engines read it.

vLLM's guidance for a model larger than a node: TP = the node's GPUs and one pipeline stage per
node, on the Ray executor. TP: a size vLLM accepts for the heads and KV heads (parallel.py).
Per GPU, the room for KV = utilization × memory − overhead (activations, CUDA graphs, NCCL
buffers) − weights / (TP × PP); a sequence's KV is split across TP ranks (KV heads, replicated
past their number; MLA's latent on every rank) and across stages (each holds its layers').
"""

from dataclasses import dataclass

from pipeline.config.vllm_defaults import GPU_MEMORY_UTILIZATION
from pipeline.planning import kv_cache, parallel
from pipeline.planning.gpus import Inventory

GIB = 2**30
OVERHEAD_GIB = 2.0  # per GPU, beside the weights and the KV cache


@dataclass(frozen=True)
class Budget:
    """What an engine may take of each GPU."""

    utilization: float = GPU_MEMORY_UTILIZATION  # --gpu-memory-utilization
    overhead_bytes: int = int(OVERHEAD_GIB * GIB)
    scheduled: int | None = None  # max_num_batched_tokens (None: vLLM's default for the GPU)

    def scheduled_on(self, gpus: Inventory) -> int:
        return self.scheduled or gpus.scheduled_tokens


@dataclass(frozen=True)
class Load:
    """What one engine holds: its weights and `users` sequences of `context` tokens of KV."""

    weights: int
    kv_dtype: str
    users: int
    context: int


@dataclass(frozen=True)
class Deployment:
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_users: int  # sequences of the load's context its KV room holds
    kv_room_bytes: int  # across all its GPUs
    why: str

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def nodes(self) -> int:
        return self.pipeline_parallel_size

    @property
    def executor(self) -> str:
        """vLLM's distributed executor: processes on one node, Ray across nodes."""
        return "ray" if self.pipeline_parallel_size > 1 else "mp"

    def vllm_flags(self) -> str:
        flags = f"--tensor-parallel-size {self.tensor_parallel_size}"
        if self.pipeline_parallel_size > 1:
            flags += (
                f" --pipeline-parallel-size {self.pipeline_parallel_size}"
                f" --distributed-executor-backend {self.executor}"
            )
        return flags


def fewest(
    config: dict, load: Load, gpus: Inventory, budget: Budget = Budget()
) -> Deployment | None:
    """The fewest GPUs that hold the load: the smallest TP vLLM accepts within one node; past a
    node, the node's largest TP × one stage per node. None: not even on all of `gpus`."""
    sizes = parallel.tensor_parallel_sizes(config, gpus.per_node)
    for pp in range(1, gpus.nodes + 1):
        for tp in sizes if pp == 1 else sizes[-1:]:
            found = at(config, load, gpus, tp, pp, budget)
            if found.max_users >= load.users:
                return found
    return None


def at(
    config: dict, load: Load, gpus: Inventory, tp: int, pp: int = 1, budget: Budget = Budget()
) -> Deployment:
    """The load at exactly TP × PP: how many of its sequences fit (0: not even the weights)."""
    room = gpus.memory_bytes * budget.utilization - budget.overhead_bytes - load.weights / (tp * pp)
    scheduled = budget.scheduled_on(gpus)
    sequence = kv_cache.bytes_per_sequence(config, load.kv_dtype, load.context, scheduled, tp)
    users = int(room // (sequence / pp)) if room > 0 else 0
    where = f"one node of {gpus.per_node}" if pp == 1 else f"{pp} nodes of {gpus.per_node}"
    why = (
        f"TP {tp}" + (f" × PP {pp}" if pp > 1 else "") + f" on {where} × "
        f"{gpus.memory_bytes / GIB:.0f} GiB: {load.weights / GIB:.1f} GiB of weights and "
        f"{users:,} × {load.context:,} tokens of KV cache (at most)"
    )
    return Deployment(tp, pp, users, int(max(room, 0) * tp * pp), why)


def per_gpu_bytes(config: dict, load: Load, tp: int, scheduled: int, overhead: int) -> int:
    """What one GPU of a TP-`tp` engine holds: its share of the weights, the load's KV cache
    on its rank, and the engine's overhead."""
    sequence = kv_cache.bytes_per_sequence(config, load.kv_dtype, load.context, scheduled, tp)
    return int(overhead + load.weights / tp + load.users * sequence)
