"""`make plan`: how many GPUs and how many users, per recipe (and the original as it ships) ×
KV-cache dtype, from the model's geometry alone — a table over the one deployment planner.

  weights          = the artifact's tensors (planning/weights.py: quantized Linears at the
                     scheme's bits + scales/zero points, everything else 16-bit)
  KV bytes / token = per layer kind (planning/kv_cache.py, models/kv_layout.py): full attention
                     stores K and V for its KV heads (GQA only those), MLA one compressed latent;
                     × bytes per element (2 for a 16-bit cache, 1 for FP8)
  KV / sequence    = KV bytes / token × the tokens vLLM keeps of a `context`-long sequence, in
                     blocks of 16: all of them, or for sliding-window layers at most
                     window − 1 + max_num_batched_tokens
  engine / GPU     = planning/engine_memory.py: what vLLM's start-up profile reserves beside
                     weights and KV — its activation peak at max_num_batched_tokens /
                     max_num_seqs, CUDA graphs, non-torch memory (or --overhead-gib, flat)
  GPUs (TP × PP)   = planning/deployment.py: the smallest TP vLLM accepts within a node that
                     holds the weights and `users` sequences' KV in utilization × memory −
                     the engine per GPU, at least one `context`-long request (else vLLM
                     refuses it at start-up); past a node, the node's TP × one stage per node
  max users        = ⌊ usable KV room per GPU / KV per sequence per GPU ⌋
"""

from dataclasses import asdict, dataclass, field

from pipeline.config.engine_name import ENGINE, PINNED, SERVE_COMMAND
from pipeline.config.recipe import RecipeFile
from pipeline.core.errors import UserError
from pipeline.planning import deployment, engine_memory, kv_cache
from pipeline.planning.deployment import Budget, Load
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import Inventory
from pipeline.planning.weights import artifact_bytes

GIB = 2**30


@dataclass
class Row:
    recipe: str
    kv_dtype: str
    weights_bytes: int
    kv_bytes_per_token: int
    kv_bytes_needed: int
    gpus: int | None  # tp × pp; None: does not fit even on MAX_NODES nodes
    max_users: int | None
    kv_room_bytes: int | None
    tp: int | None = None  # tensor parallel: within a node, a size vLLM accepts (parallel.py)
    pp: int | None = None  # pipeline stages: one per node beyond the first
    executor: str | None = None  # vLLM's: "mp" on one node, "ray" across nodes
    expert_parallel: bool = False  # --enable-expert-parallel: the plain TP split is refused
    engine_flags: str | None = None  # the layout's serve flags
    refused: list[str] = field(default_factory=list)  # why smaller layouts would not load
    engine: dict | None = None  # vLLM's engine memory per GPU (engine_memory.EngineMemory)
    engine_line: str | None = None  # … as the table's note says it

    @property
    def nodes(self) -> int | None:
        return self.pp


def row(
    g: Geometry,
    recipe: RecipeFile | None,
    load: Load,
    gpus: Inventory,
    budget: Budget,
) -> Row:
    """The planner's deployment of one recipe (None: the original) × KV dtype
    (planning/deployment.py), as a row."""
    recipe_name = recipe.name if recipe else "original"
    per_token = kv_cache.bytes_per_token(g, load.kv_dtype)
    scheduled = budget.scheduled_on(gpus, load.context)
    per_sequence = kv_cache.bytes_per_sequence(g, load.kv_dtype, load.context, scheduled)
    needed = load.users * per_sequence
    found = deployment.fewest(g, load, gpus, budget, recipe)
    if found is None:
        return Row(recipe_name, load.kv_dtype, load.weights, per_token, needed, None, None, None)
    engine = found.engine
    return Row(
        recipe_name, load.kv_dtype, load.weights, per_token, needed, found.gpus,
        found.max_users, found.kv_room_bytes, found.tensor_parallel_size,
        found.pipeline_parallel_size, found.executor, found.expert_parallel,
        found.engine_flags(), list(found.refused), engine.record() if engine else None,
        engine.line() if engine else None,
    )  # fmt: skip


def plan(
    g: Geometry,
    recipes: list,
    kv_dtypes: list[str],
    users: int,
    context: int,
    gpus: Inventory,
    budget: Budget | None = None,
) -> list[Row]:
    """Rows for the original (as it ships: Geometry.original_bytes) and each recipe, × each KV
    dtype."""
    budget = budget or Budget()
    scheduled = budget.scheduled_on(gpus, context)
    if min(users, context, scheduled) < 1:
        raise UserError(
            f"users, context and max-num-batched-tokens must be ≥ 1 "
            f"(got {users}, {context}, {scheduled})"
        )
    weights = [(None, g.original_bytes)]
    weights += [(r, artifact_bytes(r, g)) for r in recipes]
    return [
        row(g, r, Load(w, kv, users, context), gpus, budget) for r, w in weights for kv in kv_dtypes
    ]


def describe(name: str, g: Geometry, gpus: Inventory, budget: Budget, context: int) -> str:
    sliding = any(group.kind == "sliding" for group in g.kv_groups)
    batch = budget.batch_on(gpus, context)
    engine = (
        f"{budget.overhead_bytes / GIB:g} GiB per GPU kept for the engine (--overhead-gib)"
        if budget.overhead_bytes is not None
        else f"per GPU, {ENGINE}'s engine as its start-up profile reserves it (activation peak of "
        f"{batch.tokens:,} tokens / {batch.seqs:,} seqs, CUDA graphs, non-torch)"
    )
    return (
        f"model {name}: {g.layers} layers; {g.kv_modelled}; original weights {g.shipped}\n"
        f"TP×PP: tensor parallel within a node of {gpus.per_node} GPUs (sizes {ENGINE} accepts for "
        f"{g.heads} heads / {g.kv_heads} KV heads) × "
        "pipeline stages, one node each\n"
        f"{budget.utilization:g} of each GPU's memory as CUDA reports it (nvidia-smi's "
        f"− {engine_memory.CUDA_RESERVED_BYTES / GIB:.2f} GiB) usable; {engine}"
        + (f"; a sliding window keeps window − 1 + {batch.tokens:,} tokens" if sliding else "")
    )


def as_json(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]


def render(rows: list[Row], users: int, context: int, gpus: Inventory) -> str:
    lines = [
        f"{users} users × {context:,} tokens of context on {gpus.name}",
        f"{'recipe':<12} {'weights GiB':>11} {'KV dtype':>8} {'KV/token KiB':>13} "
        f"{'KV needed GiB':>14} {'GPUs (TP×PP)':>12} {'max users':>10}",
    ]
    for r in rows:
        shape = f"{r.tp}×{r.pp}" if r.pp and r.pp > 1 else str(r.gpus)
        shape = shape if r.gpus else f">{gpus.count}"
        users_max = f"{r.max_users:,}" if r.max_users is not None else "-"
        lines.append(
            f"{r.recipe:<12} {r.weights_bytes / GIB:>11.1f} {r.kv_dtype:>8} "
            f"{r.kv_bytes_per_token / 1024:>13.1f} {r.kv_bytes_needed / GIB:>14.1f} "
            f"{shape:>12} {users_max:>10}"
        )
    if spanning := next((r for r in rows if r.pp and r.pp > 1), None):
        lines.append(
            "TP×PP: one pipeline stage per node, on a Ray cluster of the nodes — "
            f"`{SERVE_COMMAND} … "
            f"--tensor-parallel-size {spanning.tp} --pipeline-parallel-size {spanning.pp} "
            f"--distributed-executor-backend {spanning.executor}`"
        )
    return "\n".join(lines + _engine_notes(rows) + _layout_notes(rows))


def _engine_notes(rows: list[Row]) -> list[str]:
    """vLLM's engine per GPU of each layout in the table (once per layout)."""
    seen: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: r.gpus or 0):
        # a row with an engine line is a deployment: it has flags
        if r.engine_line and r.engine_flags is not None and r.engine_flags not in seen:
            seen[r.engine_flags] = f"{ENGINE}'s engine per GPU at {r.engine_flags}: {r.engine_line}"
    return list(seen.values())


def _layout_notes(rows: list[Row]) -> list[str]:
    """Per recipe whose layout is not the plain one: its flags and why (once per recipe, or
    per KV dtype where its KV dtypes' notes differ)."""
    notes: dict[tuple, Row] = {}
    for r in rows:
        key = (r.recipe, tuple(r.refused), r.engine_flags)
        if r.refused and key not in notes:
            notes[key] = r
    found = []
    for r in notes.values():
        alone = sum(1 for key in notes if key[0] == r.recipe) == 1
        kv = "" if alone else f" (KV {r.kv_dtype})"
        found.append(f"{r.recipe}: {PINNED} would refuse{kv} —")
        found += [f"  {reason}" for reason in r.refused]
        found.append(
            f"  → `{SERVE_COMMAND} … {r.engine_flags}`" if r.engine_flags else "  → no layout loads"
        )
    return found
