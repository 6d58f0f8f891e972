"""How one model is deployed on GPUs — tensor parallel within a node, pipeline stages across
nodes, the executor, how many users it holds, and why — decided here, once: `make plan`,
`make advise`, the chain plan, the eval and serve engines read it.

vLLM's guidance for a model larger than a node: TP = the node's GPUs and one pipeline stage per
node, on the Ray executor. TP: a size vLLM accepts for the heads and KV heads (parallel.py).
Per GPU, the room for KV = utilization × memory − vLLM's engine (its profile's activation peak,
CUDA graphs and non-torch memory: engine_memory.py) − weights / (TP × PP); a layout whose room
is under one `context`-long request is one vLLM refuses at start-up, passed over with its
reason. A sequence's KV is split across TP ranks (KV heads, replicated
past their number; MLA's latent on every rank) and across stages (each holds its layers').
A quantized model's TP must also keep its blocks and groups whole on each rank (layout.py);
where a TP slices a MoE model's experts across them, expert parallel places whole experts
instead, and a TP that loads neither way is passed over, its reason kept.
"""

from dataclasses import dataclass, replace

from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION
from pipeline.config.engine_name import ENGINE
from pipeline.config.recipe import RecipeFile
from pipeline.planning import engine_memory, kv_cache, layout, parallel
from pipeline.planning.engine_memory import Batch, EngineMemory
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import Inventory

GIB = 2**30


@dataclass(frozen=True)
class Budget:
    """What an engine may take of each GPU, and the batch vLLM profiles it at."""

    utilization: float = GPU_MEMORY_UTILIZATION  # --gpu-memory-utilization
    overhead_bytes: int | None = None  # a flat allowance per GPU (None: vLLM's rule)
    scheduled: int | None = None  # max_num_batched_tokens (None: vLLM's default for the GPU)
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU
    offline: bool = False  # `vllm.LLM`'s batch defaults, not `vllm serve`'s

    def batch_on(self, gpus: Inventory, max_model_len: int) -> Batch:
        return engine_memory.batch(
            gpus.name, gpus.memory_bytes, max_model_len, self.offline, self.scheduled,
            self.max_num_seqs,
        )  # fmt: skip

    def scheduled_on(self, gpus: Inventory, max_model_len: int) -> int:
        """max_num_batched_tokens: what a sliding window keeps beyond its window."""
        return self.batch_on(gpus, max_model_len).tokens

    def engine(
        self, g: Geometry, gpus: Inventory, tp: int, pp: int, max_model_len: int, ep: bool = False
    ) -> EngineMemory:
        """vLLM's engine memory on one GPU of a TP × PP engine (or the flat allowance given)."""
        if self.overhead_bytes is not None:
            return engine_memory.flat(self.overhead_bytes)
        return engine_memory.per_gpu(g, tp, pp, self.batch_on(gpus, max_model_len), ep)


@dataclass(frozen=True)
class Load:
    """What one engine holds: its weights and `users` sequences of `context` tokens of KV.
    `max_model_len`: the context the engine is started with, where longer than the load's
    (a serve sweep of short requests on an engine of 4,096): vLLM refuses it at start-up unless
    one request of that length fits, and sizes its profile batch by it."""

    weights: int
    kv_dtype: str
    users: int
    context: int
    max_model_len: int | None = None

    @property
    def longest(self) -> int:
        return max(self.max_model_len or 0, self.context)


@dataclass(frozen=True)
class Deployment:
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_users: int  # sequences of the load's context its KV room holds
    kv_room_bytes: int  # across all its GPUs
    why: str
    expert_parallel: bool = False  # --enable-expert-parallel: whole experts on each rank
    refused: tuple[str, ...] = ()  # why vLLM would refuse the smaller layouts passed over
    engine: EngineMemory | None = None  # per GPU, beside weights and KV (engine_memory.py)
    short: str | None = None  # why vLLM refuses it at start-up: under one request's KV

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

    def engine_flags(self) -> str:
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
            refused += [found.short] if found.short else []
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
    engine = budget.engine(g, gpus, tp, pp, load.longest, expert_parallel)
    usable = engine_memory.usable_bytes(gpus.memory_bytes, budget.utilization)
    room = usable - engine.total - load.weights / (tp * pp)
    scheduled = budget.scheduled_on(gpus, load.longest)
    sequence = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.context, scheduled, tp)
    longest = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.longest, scheduled, tp)
    users = int(room // (sequence / pp)) if room > 0 else 0
    short = None
    if 0 < room < longest / pp:  # vLLM: "… KV cache is needed, which is larger than …"
        short = (
            f"TP {tp}{f' × PP {pp}' if pp > 1 else ''}: {room / GIB:.2f} GiB of KV per GPU "
            f"beside {load.weights / (tp * pp) / GIB:.1f} GiB of weights and "
            f"{engine.total / GIB:.2f} GiB of {ENGINE}'s engine, under the "
            f"{longest / pp / GIB:.2f} GiB one {load.longest:,}-token request needs: "
            f"{ENGINE} refuses it at start-up"
        )
        users = 0  # however many shorter sequences the room would hold
    where = f"one node of {gpus.per_node}" if pp == 1 else f"{pp} nodes of {gpus.per_node}"
    why = (
        f"TP {tp}"
        + (f" × PP {pp}" if pp > 1 else "")
        + (" with expert parallel" if expert_parallel else "")
        + f" on {where} × "
        f"{gpus.memory_bytes / GIB:.0f} GiB: {load.weights / GIB:.1f} GiB of weights and "
        f"{users:,} × {load.context:,} tokens of KV cache (at most)"
    )
    room_bytes = int(max(room, 0) * tp * pp)
    return Deployment(tp, pp, users, room_bytes, why, expert_parallel, (), engine, short)


def per_gpu_bytes(g: Geometry, load: Load, tp: int, scheduled: int, engine: int) -> int:
    """What one GPU of a TP-`tp` engine holds: its share of the weights, the load's KV cache
    on its rank, and vLLM's engine memory (`engine`: engine_memory.py)."""
    sequence = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.context, scheduled, tp)
    longest = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.longest, scheduled, tp)
    return int(engine + load.weights / tp + max(load.users * sequence, longest))


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
