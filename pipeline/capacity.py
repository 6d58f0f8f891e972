"""Capacity planner: how many GPUs and how many users, from the model config alone.

Per recipe (and the unquantized original) × KV-cache dtype:

  weights          = the artifact's tensors (pipeline.quantize.plan.artifact_bytes: quantized
                     Linears at the scheme's bits + scales/zero points, everything else 16-bit)
  KV bytes / token = layers × KV heads × head_dim × 2 (K and V) × bytes per element
                     (2 for a 16-bit cache, 1 for FP8); GQA models store only their KV heads
  KV for the load  = KV bytes / token × context × users
  per GPU, usable  = GPU memory × gpu_memory_utilization (vLLM's default 0.9)
                     − weights / TP − overhead (activations, CUDA graphs, NCCL buffers;
                     default OVERHEAD_GIB per GPU, `--overhead-gib`)
  GPUs             = the smallest tensor-parallel size that divides the attention heads and
                     leaves room for the KV of `users` × `context` across its GPUs
  max users        = ⌊ KV room on that many GPUs / (KV bytes / token × context) ⌋

vLLM allocates KV in blocks (16 tokens on GPU): the planner's token counts are an upper bound
within one block per sequence.
"""

from dataclasses import asdict, dataclass

from pipeline.core.errors import UserError
from pipeline.models import architecture
from pipeline.quantize.plan import artifact_bytes

GIB = 2**30
MIB = 2**20
OVERHEAD_GIB = 2.0
# Memory as nvidia-smi reports it (MiB)
GPUS = {
    "A100-40GB": 40_960 * MIB,
    "A100-80GB": 81_920 * MIB,
    "H100-80GB": 81_559 * MIB,
    "H200-141GB": 143_771 * MIB,
    "L40S-48GB": 46_068 * MIB,
}
KV_BYTES = {"auto": 2, "bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
MAX_TP = 64


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
            if value > 0:
                return int(value * unit)
    raise UserError(f"unknown GPU '{name}'; known: {', '.join(GPUS)}, or a size like 24GiB")


def kv_bytes_per_token(config: dict, kv_dtype: str) -> int:
    if kv_dtype not in KV_BYTES:
        raise UserError(f"unknown KV-cache dtype '{kv_dtype}'; valid: {', '.join(KV_BYTES)}")
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    per_element = KV_BYTES[kv_dtype]
    return config["num_hidden_layers"] * kv_heads * architecture.head_dim(config) * 2 * per_element


def kv_tokens(pool_bytes: int, config: dict, kv_dtype: str) -> int:
    """Tokens a KV pool of pool_bytes holds: what vLLM reports as its KV cache size."""
    return pool_bytes // kv_bytes_per_token(config, kv_dtype)


@dataclass
class Row:
    recipe: str
    kv_dtype: str
    weights_bytes: int
    kv_bytes_per_token: int
    kv_bytes_needed: int
    gpus: int | None  # None: does not fit even at MAX_TP
    max_users: int | None
    kv_room_bytes: int | None


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
) -> Row:
    per_token = kv_bytes_per_token(config, kv_dtype)
    needed = per_token * context * users
    heads = config["num_attention_heads"]
    for tp in range(1, MAX_TP + 1):
        if heads % tp:
            continue
        room = tp * (gpu * utilization - overhead) - weights
        if room >= needed:
            return Row(
                recipe_name,
                kv_dtype,
                weights,
                per_token,
                needed,
                tp,
                int(room // (per_token * context)),
                int(room),
            )
    return Row(recipe_name, kv_dtype, weights, per_token, needed, None, None, None)


def plan(
    config: dict,
    recipes: list,
    kv_dtypes: list[str],
    users: int,
    context: int,
    gpu: int,
    utilization: float = 0.9,
    overhead_gib: float = OVERHEAD_GIB,
) -> list[Row]:
    """Rows for the original (16-bit weights) and each recipe, × each KV dtype."""
    if users < 1 or context < 1:
        raise UserError(f"users and context must be ≥ 1 (got {users}, {context})")
    weights = [("original", architecture.total_params(config) * 2)]
    weights += [(r.name, artifact_bytes(r, config)) for r in recipes]
    overhead = int(overhead_gib * GIB)
    return [
        plan_row(config, name, w, kv, users, context, gpu, utilization, overhead)
        for name, w in weights
        for kv in kv_dtypes
    ]


def describe(name: str, config: dict, utilization: float, overhead_gib: float) -> str:
    kv_heads = config.get("num_key_value_heads")
    return (
        f"model {name}: {config['num_hidden_layers']} layers, {kv_heads} KV heads × head dim "
        f"{architecture.head_dim(config)}; {utilization:g} of each GPU usable, "
        f"{overhead_gib:g} GiB per GPU kept for activations/engine"
    )


def as_json(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]


def render(rows: list[Row], users: int, context: int, gpu_label: str) -> str:
    lines = [
        f"{users} users × {context:,} tokens of context on {gpu_label}",
        f"{'recipe':<12} {'weights GiB':>11} {'KV dtype':>8} {'KV/token KiB':>13} "
        f"{'KV needed GiB':>14} {'GPUs (TP)':>9} {'max users':>10}",
    ]
    for r in rows:
        gpus = str(r.gpus) if r.gpus else f">{MAX_TP}"
        users_max = f"{r.max_users:,}" if r.max_users is not None else "-"
        lines.append(
            f"{r.recipe:<12} {r.weights_bytes / GIB:>11.1f} {r.kv_dtype:>8} "
            f"{r.kv_bytes_per_token / 1024:>13.1f} {r.kv_bytes_needed / GIB:>14.1f} "
            f"{gpus:>9} {users_max:>10}"
        )
    return "\n".join(lines)
