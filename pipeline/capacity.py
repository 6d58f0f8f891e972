"""Capacity planner: how many GPUs and how many users, from the model config alone.

Per recipe (and the unquantized original) × KV-cache dtype:

  weights          = the artifact's tensors (pipeline.quantize.plan.artifact_bytes: quantized
                     Linears at the scheme's bits + scales/zero points, everything else 16-bit)
  KV bytes / token = per layer kind (pipeline.models.kv_layout): full attention stores K and V
                     for its KV heads (GQA stores only those), MLA one compressed latent;
                     × bytes per element (2 for a 16-bit cache, 1 for FP8)
  KV / sequence    = KV bytes / token × the tokens vLLM keeps of a `context`-long sequence, in
                     blocks of 16: all of them, or for sliding-window layers at most
                     window − 1 + max_num_batched_tokens
  per GPU, usable  = GPU memory × gpu_memory_utilization (vLLM's default 0.9)
                     − weights / TP − overhead (activations, CUDA graphs, NCCL buffers;
                     default OVERHEAD_GIB per GPU, `--overhead-gib`)
  GPUs             = the smallest tensor-parallel size that divides the attention heads and
                     holds `users` sequences' KV on each GPU (KV heads split across ranks,
                     replicated beyond their number; MLA's latent replicated on every rank)
  max users        = ⌊ usable KV room per GPU / KV per sequence per GPU ⌋
"""

from dataclasses import asdict, dataclass

from pipeline.config.vllm_defaults import GPU_MEMORY_UTILIZATION
from pipeline.core.errors import UserError
from pipeline.models import kv_layout
from pipeline.planning import geometry, parallel
from pipeline.planning.gpus import SPECS
from pipeline.quantize.plan import artifact_bytes

GIB = 2**30
MIB = 2**20
OVERHEAD_GIB = 2.0
# Memory as nvidia-smi reports it, per known GPU type (pipeline/planning/gpus.py: one table)
GPUS = {name: spec.memory_bytes for name, spec in SPECS.items()}
KV_BYTES = {"auto": 2, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
GPUS_PER_NODE = 8  # vLLM's guidance: TP within a node, pipeline stages across nodes
MAX_NODES = 8
MAX_TP = GPUS_PER_NODE * MAX_NODES  # the most GPUs a plan proposes


def gpu_bytes(name: str) -> int:
    """A known GPU type (A100-80GB, H100-80GB, …) or a size: '24GiB', '48GB', '80'."""
    for known, size in GPUS.items():
        if name.lower() == known.lower():
            return size
    text = name.strip().lower()
    for suffix, unit in (("gib", GIB), ("gb", 10**9), ("", GIB)):
        if text.endswith(suffix):
            try:
                value = float(text.removesuffix(suffix) if suffix else text)
            except ValueError:
                continue
            if 0 < value < 2**20:  # up to a PiB-sized GPU: not inf, not nan
                return int(value * unit)
    raise UserError(f"unknown GPU '{name}'; known: {', '.join(GPUS)}, or a size like 24GiB")


CPU_SCHEDULED_TOKENS = 2_048  # vLLM 0.32's max_num_batched_tokens for `vllm serve` on CPU


def scheduled_tokens(gpu_name: str, gpu: int) -> int:
    """vLLM 0.32's default max_num_batched_tokens for `vllm serve` on this GPU (what a sliding
    window keeps beyond its window): 16,384 from 160 GiB, 8,192 on H100/H200-class, else 2,048."""
    if gpu >= 160 * GIB:
        return 16_384
    if gpu >= 70 * GIB and "a100" not in gpu_name.lower():
        return 8_192
    return 2_048


def element_bytes(kv_dtype: str) -> int:
    if kv_dtype not in KV_BYTES:
        raise UserError(f"unknown KV-cache dtype '{kv_dtype}'; valid: {', '.join(KV_BYTES)}")
    return KV_BYTES[kv_dtype]


def kv_bytes_per_token(config: dict, kv_dtype: str) -> int:
    return kv_layout.bytes_per_token(config, element_bytes(kv_dtype))


def kv_tokens(
    pool_bytes: int, config: dict, kv_dtype: str, max_model_len: int, block: int, scheduled: int
) -> int:
    """What vLLM 0.32 logs as its "KV cache size: N tokens": how many max_model_len requests
    the pool admits (its blocks over the blocks one request may hold), × max_model_len. The
    pool's tokens for full attention; more where a sliding window caps what a request holds."""
    per_block = kv_bytes_per_token(config, kv_dtype) * block
    size = element_bytes(kv_dtype)
    blocks_per_request = (
        kv_layout.bytes_per_sequence(config, size, max_model_len, scheduled, block=block)
        / per_block
    )
    return int(pool_bytes // per_block / blocks_per_request * max_model_len)


def max_requests(
    pool_bytes: int, config: dict, kv_dtype: str, tokens: int, block: int, scheduled: int
) -> int:
    """Requests of `tokens` tokens each the pool holds at once: the memory-bound concurrency."""
    size = element_bytes(kv_dtype)
    per_request = kv_layout.bytes_per_sequence(config, size, tokens, scheduled, block=block)
    return int(pool_bytes // per_request)


def per_gpu_bytes(
    config: dict,
    weights: int,
    kv_dtype: str,
    users: int,
    context: int,
    tp: int,
    scheduled: int,
    overhead: int,
) -> int:
    """What one GPU of a TP-`tp` engine holds: its share of the weights, `users` × `context`
    of KV cache on its rank, and the engine's overhead."""
    size = element_bytes(kv_dtype)
    sequence = kv_layout.bytes_per_sequence(config, size, context, scheduled, tp)
    return int(overhead + weights / tp + users * sequence)


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

    @property
    def nodes(self) -> int | None:
        return self.pp


def plan_row(
    config: dict,
    recipe_name: str,
    weights: int,
    kv_dtype: str,
    users: int,
    context: int,
    gpu: int,
    utilization: float,
    overhead: int,
    scheduled: int,
    gpus_per_node: int = GPUS_PER_NODE,
) -> Row:
    """The fewest GPUs that hold the weights and `users` × `context` of KV: the smallest TP
    vLLM accepts within one node; past a node, TP = the node's largest and one pipeline stage
    per node (each stage holds its share of the layers, and of the KV cache)."""
    per_token = kv_bytes_per_token(config, kv_dtype)
    size = element_bytes(kv_dtype)
    needed = users * kv_layout.bytes_per_sequence(config, size, context, scheduled)
    sizes = parallel.tensor_parallel_sizes(config, gpus_per_node)
    for pp in range(1, MAX_NODES + 1):
        for tp in sizes if pp == 1 else sizes[-1:]:
            room = gpu * utilization - overhead - weights / (tp * pp)  # per GPU
            sequence = kv_layout.bytes_per_sequence(config, size, context, scheduled, tp) / pp
            if room >= users * sequence:
                return Row(
                    recipe_name, kv_dtype, weights, per_token, needed, tp * pp,
                    int(room // sequence), int(room * tp * pp), tp, pp,
                    "ray" if pp > 1 else "mp",
                )  # fmt: skip
    return Row(recipe_name, kv_dtype, weights, per_token, needed, None, None, None)


def plan(
    config: dict,
    recipes: list,
    kv_dtypes: list[str],
    users: int,
    context: int,
    gpu: int,
    utilization: float = GPU_MEMORY_UTILIZATION,
    overhead_gib: float = OVERHEAD_GIB,
    scheduled: int = 8_192,
) -> list[Row]:
    """Rows for the original (as it ships: planning/shipped.py) and each recipe, × each KV
    dtype."""
    if min(users, context, scheduled) < 1:
        raise UserError(
            f"users, context and max-num-batched-tokens must be ≥ 1 "
            f"(got {users}, {context}, {scheduled})"
        )
    weights = [("original", geometry.of(config).original_bytes)]
    weights += [(r.name, artifact_bytes(r, config)) for r in recipes]
    overhead = int(overhead_gib * GIB)
    return [
        plan_row(config, name, w, kv, users, context, gpu, utilization, overhead, scheduled)
        for name, w in weights
        for kv in kv_dtypes
    ]


def describe(
    name: str, config: dict, utilization: float, overhead_gib: float, scheduled: int
) -> str:
    g = geometry.of(config)
    sliding = any(g.kind == "sliding" for g in kv_layout.groups(config))
    return (
        f"model {name}: {g.layers} layers; {g.kv_modelled}; original weights {g.shipped}\n"
        f"TP×PP: tensor parallel within a node of {GPUS_PER_NODE} GPUs (sizes vLLM accepts for "
        f"{g.heads} heads / {g.kv_heads} KV heads) × "
        "pipeline stages, one node each\n"
        f"{utilization:g} of each GPU usable, {overhead_gib:g} GiB per GPU kept for "
        "activations/engine"
        + (f"; a sliding window keeps window − 1 + {scheduled:,} tokens" if sliding else "")
    )


def as_json(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]


def render(rows: list[Row], users: int, context: int, gpu_label: str) -> str:
    lines = [
        f"{users} users × {context:,} tokens of context on {gpu_label}",
        f"{'recipe':<12} {'weights GiB':>11} {'KV dtype':>8} {'KV/token KiB':>13} "
        f"{'KV needed GiB':>14} {'GPUs (TP×PP)':>12} {'max users':>10}",
    ]
    for r in rows:
        gpus = (f"{r.tp}×{r.pp}" if r.pp and r.pp > 1 else str(r.gpus)) if r.gpus else f">{MAX_TP}"
        users_max = f"{r.max_users:,}" if r.max_users is not None else "-"
        lines.append(
            f"{r.recipe:<12} {r.weights_bytes / GIB:>11.1f} {r.kv_dtype:>8} "
            f"{r.kv_bytes_per_token / 1024:>13.1f} {r.kv_bytes_needed / GIB:>14.1f} "
            f"{gpus:>12} {users_max:>10}"
        )
    if spanning := next((r for r in rows if r.pp and r.pp > 1), None):
        lines.append(
            f"TP×PP: one pipeline stage per node, on a Ray cluster of the nodes — `vllm serve … "
            f"--tensor-parallel-size {spanning.tp} --pipeline-parallel-size {spanning.pp} "
            f"--distributed-executor-backend {spanning.executor}`"
        )
    return "\n".join(lines)
