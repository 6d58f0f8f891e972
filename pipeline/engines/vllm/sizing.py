"""How large a vLLM engine each side of a comparison needs on this host: tensor-parallel size,
memory utilization and batch, from the one deployment planner (planning/deployment.py: the
same arithmetic as `make plan` and `make advise`).

The original may need more GPUs than the artifact — that is the point of quantizing: Llama-3-70B
in bf16 (141 GB of weights) takes two 80 GB GPUs, its FP8 artifact one. Each side gets the
smallest tensor-parallel size vLLM accepts (heads and KV heads) that holds its weights plus the
KV cache of `users` sequences of `context` tokens; more GPUs than the host has is refused
(exit 4) before any engine starts. On a CPU host the engine is one process, eager (compiling
takes minutes there and buys little).
"""

from dataclasses import asdict, dataclass

from pipeline.config.recipe import RecipeFile
from pipeline.core.devices import Gpu
from pipeline.core.errors import NotOnThisHost
from pipeline.engines.vllm import placement
from pipeline.planning import deployment
from pipeline.planning.deployment import Budget, Load
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import GPUS_PER_NODE, MAX_NODES, Inventory, this_node

GIB = 2**30
UTILIZATION = placement.UTILIZATION
DEFAULT_BUDGET = Budget(UTILIZATION)  # `vllm serve`'s batch defaults for the GPU


def llm_budget(users: int) -> Budget:
    """A `vllm.LLM` engine with max_num_seqs = `users` (eval's): vLLM's offline batch defaults,
    the tokens clamped to users × max_model_len (engine_memory.batch)."""
    return Budget(UTILIZATION, max_num_seqs=users, offline=True)


@dataclass(frozen=True)
class Engine:
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_num_seqs: int
    enforce_eager: bool
    reason: str  # how the size was chosen, for results and cards
    enable_expert_parallel: bool = False  # the recipe's blocks straddle a plain TP split

    def vllm_kwargs(self) -> dict:
        """What `vllm.LLM(...)` / lm-eval's vllm model take (expert parallel only when on)."""
        found = asdict(self)
        found.pop("reason")
        if not found["enable_expert_parallel"]:
            found.pop("enable_expert_parallel")
        return found

    def describe(self) -> dict:
        return asdict(self)


def engine(
    g: Geometry,
    load: Load,
    gpus: list[str],
    label: str,
    budget: Budget = DEFAULT_BUDGET,
    recipe: RecipeFile | None = None,
) -> Engine:
    """The engine for `label`'s load (its weights, `users` × `context` tokens of KV) on the GPUs
    this process sees (nvidia-smi's lines, "NVIDIA H100 80GB HBM3, 81559 MiB"); with the
    `recipe` of a quantized artifact, a TP vLLM loads it at (expert parallel where it must)."""
    node = this_node(gpus)
    if node is None:
        return Engine(1, budget.utilization, load.users, True, "CPU host: one engine, eager")
    found = deployment.fewest(g, load, node, budget, recipe)  # this host: one node
    if found is None:
        raise NotOnThisHost(_too_large(g, load, node, budget, recipe, label))
    kv = f"{load.users} × {load.context:,} tokens of KV cache"
    reason = (
        f"tensor parallel {found.tensor_parallel_size}: the fewest of this host's "
        f"{node.per_node} × {node.memory_bytes / GIB:.0f} GiB GPUs that hold "
        f"{load.weights / GIB:.1f} GiB of weights and {kv} (a size vLLM accepts for the heads)"
        + "".join(f"; {why}" for why in found.refused)
    )
    tp, ep = found.tensor_parallel_size, found.expert_parallel
    return Engine(tp, budget.utilization, load.users, False, reason, ep)


def _too_large(g: Geometry, load: Load, node, budget: Budget, recipe, label: str) -> str:
    everywhere = Inventory(node.hardware, GPUS_PER_NODE)
    wide = deployment.fewest(g, load, everywhere, budget, recipe)
    need = f"{wide.gpus}" if wide else f"more than {GPUS_PER_NODE * MAX_NODES}"
    return (
        f"{label}: {load.weights / GIB:.1f} GiB of weights and {load.users} × "
        f"{load.context:,} tokens of KV cache need {need} GPUs of "
        f"{node.memory_bytes / GIB:.0f} GiB (tensor parallel); this host has {node.per_node}"
    )


@dataclass(frozen=True)
class ServeSide:
    key: str  # "original" | "quantized"
    label: str
    weights: int
    kv_dtype: str
    recipe: RecipeFile | None = None  # the quantized side's: a TP vLLM loads it at


def serve_placement(
    g: Geometry,
    sides: list[ServeSide],
    gpus: list[Gpu],
    users: int,
    context: int,
    tensor_parallel_size: int | None = None,
    utilization: float = UTILIZATION,
    pipeline_parallel_size: int = 1,
    max_model_len: int | None = None,
) -> placement.Placement:
    """Each side of a paired serve on this process's GPUs: its TP from the planner (or the one
    given for both), then where it runs and with which share (planning/placement.py).
    `max_model_len`: what the servers start with (one request of it must fit each side)."""
    lines = [g.line() for g in gpus]
    needs = []
    for side in sides:
        load = Load(side.weights, side.kv_dtype, users, context, max_model_len)
        tp = (
            tensor_parallel_size
            or (  # the planner's only where none was given
                engine(g, load, lines, side.label, Budget(utilization), side.recipe)
            ).tensor_parallel_size
        )
        per_gpu = _per_gpu(g, gpus, load)
        needs.append(placement.Need(side.key, side.label, tp, per_gpu, pipeline_parallel_size))
    return placement.place(needs, gpus, utilization)


def _per_gpu(g: Geometry, gpus: list[Gpu], load: Load):
    node = this_node([g.line() for g in gpus])
    budget = Budget()

    def at(tp: int) -> int:
        if node is None:  # no GPU: nothing is placed by bytes
            return deployment.per_gpu_bytes(g, load, tp, 0, 0)
        engine = budget.engine(g, node, tp, 1, load.longest).total
        scheduled = budget.scheduled_on(node, load.longest)
        return deployment.per_gpu_bytes(g, load, tp, scheduled, engine)

    return at
