"""How one model is deployed on GPUs — tensor parallel within a node, pipeline stages across
nodes, the executor, how many users it holds, and why — decided here, once: `make plan`,
`make advise`, the chain plan, the eval and serve engines read it.

vLLM's guidance for a model larger than a node: TP = the node's GPUs and one pipeline stage per
node, on the Ray executor. TP: a size vLLM accepts for the heads and KV heads (parallel.py).
Per GPU, the room for KV = utilization × memory − overhead (activations, CUDA graphs, NCCL
buffers) − weights / (TP × PP); a sequence's KV is split across TP ranks (KV heads, replicated
past their number; MLA's latent on every rank) and across stages (each holds its layers').
A quantized model's TP must also keep its blocks and groups whole on each rank (layout.py);
where a TP slices a MoE model's experts across them, expert parallel places whole experts
instead, and a TP that loads neither way is passed over, its reason kept.
"""

from dataclasses import dataclass, replace

from pipeline.config.recipe import RecipeFile
from pipeline.config.vllm_defaults import GPU_MEMORY_UTILIZATION
from pipeline.planning import kv_cache, layout, parallel
from pipeline.planning.geometry import Geometry
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
    expert_parallel: bool = False  # --enable-expert-parallel: whole experts on each rank
    refused: tuple[str, ...] = ()  # why vLLM would refuse the smaller layouts passed over

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
        if self.expert_parallel:
            flags += f" {layout.EP_FLAG}"
        return flags


@dataclass(frozen=True)
class Split:
    """How vLLM would load a recipe's artifact at one TP."""

    loads: bool
    expert_parallel: bool = False
    reason: str | None = None  # why the plain split is refused (None: it loads as is)


def split(g: Geometry, recipe: RecipeFile | None, tp: int) -> Split:
    """Plain TP if vLLM loads it; else expert parallel where the model has experts and that
    loads; else refused. No recipe (the original, unquantized): always plain."""
    if recipe is None:
        return Split(True)
    reason = layout.recipe_refusal(g, recipe, tp)
    if reason is None:
        return Split(True)
    if tp > 1 and g.linears.has_experts:
        if layout.recipe_refusal(g, recipe, tp, expert_parallel=True) is None:
            return Split(True, True, reason)
    return Split(False, reason=reason)


def passed_over(tp: int, reason: str) -> str:
    """A refused TP's line for `refused`: its reason, with what the planner did instead."""
    if reason.endswith(f"; expert parallel ({layout.EP_FLAG}) loads"):
        return reason.removesuffix(f" ({layout.EP_FLAG}) loads") + " instead"
    return reason if reason.startswith(f"TP {tp}") else f"TP {tp}: {reason}"


def fewest(
    g: Geometry,
    load: Load,
    gpus: Inventory,
    budget: Budget = Budget(),
    recipe: RecipeFile | None = None,
) -> Deployment | None:
    """The fewest GPUs that hold the load: the smallest TP vLLM accepts within one node (for
    `recipe`'s artifact: one whose split it loads, with expert parallel if it must); past a
    node, the node's largest such TP × one stage per node (PP does not change the TP split).
    None: not even on all of `gpus`. `refused` says why smaller layouts were passed over."""
    sizes = parallel.tensor_parallel_sizes(g, gpus.per_node)
    splits = {tp: split(g, recipe, tp) for tp in sizes}
    loading = [tp for tp in sizes if splits[tp].loads]
    refused: list[str] = []  # TPs vLLM would refuse however it split the experts
    for pp in range(1, gpus.nodes + 1):
        for tp in sizes if pp == 1 else loading[-1:]:
            s = splits[tp]
            if not s.loads:
                refused += [passed_over(tp, s.reason)] if pp == 1 and s.reason else []
                continue
            found = at(g, load, gpus, tp, pp, budget, s.expert_parallel)
            if found.max_users >= load.users:
                own = [passed_over(tp, s.reason)] if s.reason else []
                return replace(found, refused=tuple(refused + own))
    return None


def at(
    g: Geometry,
    load: Load,
    gpus: Inventory,
    tp: int,
    pp: int = 1,
    budget: Budget = Budget(),
    expert_parallel: bool = False,
) -> Deployment:
    """The load at exactly TP × PP: how many of its sequences fit (0: not even the weights).
    With expert parallel the fullest rank holds ceil(E / TP) whole experts, not 1 / TP of each:
    the same share where TP divides the expert count (128 at TP 8); where it does not (60 at
    TP 8: 8 for 7.5) the fullest rank's expert weights are undercounted by that ratio — not
    modelled: weights / (TP × PP) is kept."""
    room = gpus.memory_bytes * budget.utilization - budget.overhead_bytes - load.weights / (tp * pp)
    scheduled = budget.scheduled_on(gpus)
    sequence = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.context, scheduled, tp)
    users = int(room // (sequence / pp)) if room > 0 else 0
    where = f"one node of {gpus.per_node}" if pp == 1 else f"{pp} nodes of {gpus.per_node}"
    why = (
        f"TP {tp}"
        + (f" × PP {pp}" if pp > 1 else "")
        + (" with expert parallel" if expert_parallel else "")
        + f" on {where} × "
        f"{gpus.memory_bytes / GIB:.0f} GiB: {load.weights / GIB:.1f} GiB of weights and "
        f"{users:,} × {load.context:,} tokens of KV cache (at most)"
    )
    return Deployment(tp, pp, users, int(max(room, 0) * tp * pp), why, expert_parallel)


def per_gpu_bytes(g: Geometry, load: Load, tp: int, scheduled: int, overhead: int) -> int:
    """What one GPU of a TP-`tp` engine holds: its share of the weights, the load's KV cache
    on its rank, and the engine's overhead."""
    sequence = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.context, scheduled, tp)
    return int(overhead + load.weights / tp + load.users * sequence)


LAYOUT_TPS = (1, 2, 4, 8)  # the TPs an artifact records whether it loads at (one node)


def layouts(g: Geometry, recipe: RecipeFile, tps: tuple[int, ...] = LAYOUT_TPS) -> list[dict]:
    """Where vLLM 0.32 loads the recipe's artifact: per TP, {"tp", "expert_parallel", "loads",
    "why"} — plain, and for a MoE model at TP > 1 with expert parallel too. `why` says why a
    layout is refused (the heads' rule first, then the blocks' and groups')."""
    moe = g.linears.has_experts
    found = []
    for tp in tps:
        for ep in (False, True) if moe and tp > 1 else (False,):
            why = parallel.tp_refusal(tp, g) or layout.recipe_refusal(g, recipe, tp, ep)
            if why and not ep:  # the EP row below says it; this row's own reason is enough
                why = why.removesuffix(f"; expert parallel ({layout.EP_FLAG}) loads")
            found.append({"tp": tp, "expert_parallel": ep, "loads": why is None, "why": why})
    return found
