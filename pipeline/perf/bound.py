"""The roofline bound: the least time one engine step can take on given hardware, from the
model's Geometry (read off config.json), the recipe's weight and KV bytes, and the
hardware's peaks.

One step per GPU of a tensor-parallel group of `tp`:

  bytes   = weights read / tp + KV read        (decode reads every cached token of each sequence)
  FLOPs   = (2 × Linear params a token multiplies × new tokens + attention) / tp
  time    ≥ max(bytes / HBM bandwidth, FLOPs / dense peak of the compute format)
            + 2 all-reduces per layer of the new tokens' hidden states (ring: 2 (tp − 1) / tp
              of them cross the link)
            + with `pp` pipeline stages (one per node), the hidden states crossing pp − 1 nodes
              through the NIC (the stages run one after another for one step: the weights each
              reads add up to the same bytes / tp)

Weights read: every Linear but the embedding (a lookup reads a row per token); of a MoE layer's
routed experts only those the step's tokens pick — with `k` of `E` chosen per token, B tokens
touch E × (1 − (1 − k/E)^B) on average (uniform routing). Compute format: the recipe's
activations (FP8 W8A8 → FP8 tensor cores, INT8 W8A8 → INT8, NVFP4 → FP4); weight-only formats
compute in 16 bits. A bound is what no engine beats: measured ÷ bound says how close one comes.
"""

from dataclasses import asdict, dataclass

from pipeline.models import architecture, kv_layout
from pipeline.planning import kv_cache
from pipeline.planning import weights as recipe_weights
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import Hardware

ACTIVATION_BYTES = 2  # hidden states cross the link in 16 bits


@dataclass(frozen=True)
class Footprint:
    """What a step of this model, quantized by this recipe, reads and computes."""

    dense_bytes: float  # read every step: non-expert Linears, LM head, norms
    expert_bytes: float  # every routed expert of every MoE layer
    dense_params: int  # Linear params each token multiplies
    expert_params: int  # every routed expert's params
    experts: int
    active_experts: int  # chosen per token
    attention_flops: int  # per new token per cached token: QK and AV over every head and layer
    hidden: int
    layers: int
    compute: str


def footprint(g: Geometry, recipe=None) -> Footprint:
    """`recipe` None: the original, 16-bit."""
    quantized: dict[bool, tuple[int, float]] = {}  # expert or not: (params, bytes)
    for lin, scheme in recipe_weights.assigned(recipe, g) if recipe else []:
        count, size = quantized.get(_is_expert(lin), (0, 0.0))
        quantized[_is_expert(lin)] = (
            count + lin.params,
            size + recipe_weights.linear_bytes(lin, scheme),
        )
    params = {True: 0, False: 0}
    for lin in g.checkpoint_linears:
        params[_is_expert(lin)] += lin.params
    stored = {}
    for expert in (True, False):
        q_params, q_bytes = quantized.get(expert, (0, 0.0))
        stored[expert] = (params[expert] - q_params) * 2 + q_bytes
    small = g.other_params - g.vocab * g.hidden  # norms, biases (no embedding)
    attention = 4 * g.heads * g.attention_dim * g.layers  # MLA attends in its latent
    return Footprint(
        dense_bytes=stored[False] + small * 2,
        expert_bytes=stored[True],
        dense_params=params[False],
        expert_params=params[True],
        experts=g.experts,
        active_experts=g.active_experts,
        attention_flops=attention,
        hidden=g.hidden,
        layers=g.layers,
        compute=compute_format(recipe),
    )


def compute_format(recipe) -> str:
    """The tensor cores the recipe's Linears run on: its activations' format."""
    schemes = [s for s, _ in recipe.schemes()] if recipe else []
    if not schemes or any(s.activation_bits is None for s in schemes):
        return "bf16"
    bits = min(s.activation_bits for s in schemes)
    if bits == 4:
        return "fp4"
    return "fp8" if all(s.weight_type == "float" for s in schemes) else "int8"


@dataclass(frozen=True)
class Step:
    seconds: float
    bytes: float  # per GPU
    flops: float  # per GPU
    link_seconds: float
    bound_by: str  # "memory" or "compute"
    compute: str  # the format the FLOPs ran at (a GPU without it: bf16)

    def describe(self) -> dict:
        return asdict(self)


def decode(
    g: Geometry,
    fp: Footprint,
    hw: Hardware,
    batch: int,
    context: int,
    kv_dtype: str,
    tp: int,
    pp: int = 1,
) -> Step:
    """One decode step: `batch` sequences with `context` cached tokens each, one new token."""
    kv = batch * _kv_sequence(g, kv_dtype, context, tp)
    attention = batch * fp.attention_flops * context
    return _step(fp, hw, batch, kv, attention, tp, pp)


def prefill(
    g: Geometry,
    fp: Footprint,
    hw: Hardware,
    prompts: int,
    length: int,
    kv_dtype: str,
    tp: int,
    pp: int = 1,
) -> Step:
    """Prefilling `prompts` prompts of `length` tokens in one step (causal attention: half of
    the square), writing their KV."""
    kv = prompts * _kv_sequence(g, kv_dtype, length, tp)
    attention = prompts * fp.attention_flops * length * length // 2
    return _step(fp, hw, prompts * length, kv, attention, tp, pp)


def _step(
    fp: Footprint, hw: Hardware, tokens: int, kv: float, attention: float, tp: int, pp: int = 1
) -> Step:
    weights = fp.dense_bytes + fp.expert_bytes * touched(fp.experts, fp.active_experts, tokens)
    share = fp.active_experts / fp.experts if fp.experts else 0
    linear = 2 * (fp.dense_params + fp.expert_params * share) * tokens
    memory_bytes = weights / tp + kv
    flops = (linear + attention) / tp
    peak, compute = hw.flops(fp.compute)
    memory_s, compute_s = memory_bytes / hw.bytes_s, flops / peak
    link = 0.0
    if tp > 1:
        crossed = 2 * (tp - 1) / tp * tokens * fp.hidden * ACTIVATION_BYTES
        link = 2 * fp.layers * crossed / hw.link_bytes_s
    if pp > 1 and hw.nic_bytes_s:  # an unknown NIC: left out, the bound stays a lower one
        link += (pp - 1) * tokens * fp.hidden * ACTIVATION_BYTES / hw.nic_bytes_s
    bound_by = "memory" if memory_s >= compute_s else "compute"
    return Step(max(memory_s, compute_s) + link, memory_bytes, flops, link, bound_by, compute)


def touched(experts: int, active: int, tokens: int) -> float:
    """Share of a MoE layer's routed experts that `tokens` tokens pick (1.0: a dense model)."""
    if not experts:
        return 1.0
    return 1 - (1 - active / experts) ** tokens


def compute_bound_batch(
    g: Geometry, fp: Footprint, hw: Hardware, context: int, kv_dtype: str, tp: int, most: int
) -> int | None:
    """The smallest decode batch (≤ most) whose step is compute-bound (None: none is)."""
    for batch in _doubling(most):
        if decode(g, fp, hw, batch, context, kv_dtype, tp).bound_by == "compute":
            low = batch // 2 + 1
            return next(
                b
                for b in range(low, batch + 1)
                if decode(g, fp, hw, b, context, kv_dtype, tp).bound_by == "compute"
            )
    return None


def _doubling(most: int):
    batch = 1
    while batch < most:
        yield batch
        batch *= 2
    yield most


def _kv_sequence(g: Geometry, kv_dtype: str, tokens: int, tp: int) -> int:
    """Bytes of the KV a sequence reads: its tokens, not the blocks they are stored in."""
    size = kv_cache.element_bytes(kv_dtype)
    return kv_layout.sequence_bytes(g.kv_groups, size, tokens, tokens, tp, block=1)


def _is_expert(lin: architecture.Linear) -> bool:
    return ".experts." in lin.name
