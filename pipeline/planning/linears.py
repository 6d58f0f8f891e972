"""A model's Linears as vLLM 0.32 builds and splits them, read once from config.json (no torch).

vLLM fuses some checkpoint Linears into one layer and splits each layer across tensor-parallel
ranks in one of a few styles (model_executor/layers/linear.py, layers/fused_moe/):

  qkv               QKVParallelLinear: q/k/v fused; heads split, a KV head replicated whole
                    once TP ≥ the KV heads (each part's output split)
  merged column     MergedColumnParallelLinear: gate/up fused; each part's output split
  column            ColumnParallelLinear: the output split (MLA's q_proj, q_b_proj, kv_b_proj)
  row               RowParallelLinear: the input split (o_proj, down_proj)
  replicated        ReplicatedLinear / GateLinear: whole on every rank (MLA's
                    kv_a_proj_with_mqa, the MoE routers, Qwen2-MoE's shared_expert_gate)
  merged replicated MergedColumnParallelLinear(disable_tp=True): DeepSeek-V3's fused_qkv_a_proj
  experts           FusedMoE: every expert's gate/up (w13) output and down (w2) input split by
                    TP on the intermediate width; with --enable-expert-parallel, whole experts
                    spread over the ranks instead (fused_moe/config.py: FusedMoEParallelConfig)
  vocab parallel    ParallelLMHead: vocabulary rows split

    lin = linears.of(config)            # or geometry.of(config).linears
    for kind in lin.kinds:              # "dense" and/or "moe" decoder layers
        for one in kind.linears: one.name, one.style, one.shard(tp=8)

The arithmetic of widths comes from models/architecture.py (head_dim, experts, moe_layers);
this module adds how vLLM fuses and splits them.
"""

import enum
import functools
import json
from dataclasses import dataclass

from pipeline.models import architecture


class Style(enum.StrEnum):
    QKV = "qkv"
    MERGED_COLUMN = "merged column"
    COLUMN = "column"
    ROW = "row"
    REPLICATED = "replicated"
    MERGED_REPLICATED = "merged replicated"
    EXPERTS = "experts"
    VOCAB = "vocab parallel"


_OUTPUT_SPLIT = (Style.QKV, Style.MERGED_COLUMN, Style.COLUMN, Style.VOCAB)


@dataclass(frozen=True)
class Shard:
    """One rank's part of a Linear."""

    in_features: int
    outputs: tuple[int, ...]  # each fused part's output (experts: w13's gate and up)
    input_split: bool  # the rank holds a slice of the input (row-parallel; experts' w2)
    output_split: bool  # … of every part's output (column-parallel; experts' w13)
    experts: int = 0  # routed experts on the fullest rank

    @property
    def intermediate(self) -> int:
        """Experts: each expert's intermediate width on this rank (w13's output, w2's input)."""
        return self.outputs[0]


@dataclass(frozen=True)
class Linear:
    name: str  # vLLM's module name inside one decoder layer ("self_attn.qkv_proj"), or lm_head
    style: Style
    in_features: int  # experts: the hidden width (w13's input, w2's output)
    outputs: tuple[int, ...]  # full output width of each fused part (experts: intermediate × 2)
    parts: tuple[str, ...]  # the checkpoint's module names it fuses
    quantized: bool = True  # False: vLLM builds it without a quantization config (routers)
    heads: int = 0  # qkv: query heads, KV heads, head sizes
    kv_heads: int = 0
    head_size: int = 0
    v_head_size: int = 0
    experts: int = 0  # experts: routed experts per layer

    @property
    def out_features(self) -> int:
        return sum(self.outputs)

    def indivisible(self, tp: int, expert_parallel: bool = False) -> str | None:
        """Why vLLM cannot split this Linear `tp` ways (its `divide` asserts); None: it can."""
        if self.style is Style.QKV:
            if self.heads % tp:
                return f"TP {tp} does not divide {self.name}'s {self.heads} heads"
            if (tp % self.kv_heads) if tp >= self.kv_heads else (self.kv_heads % tp):
                return f"TP {tp} and {self.name}'s {self.kv_heads} KV heads do not divide"
            return None
        widths = {
            Style.MERGED_COLUMN: self.outputs,
            Style.COLUMN: self.outputs,
            Style.ROW: (self.in_features,),
            # FusedMoEConfig.__post_init__ asserts intermediate % TP (1 under expert parallel)
            Style.EXPERTS: () if _moe_ep(tp, expert_parallel) else self.outputs[:1],
        }.get(self.style, ())
        bad = [w for w in widths if w % tp]
        return f"TP {tp} does not divide {self.name}'s {bad[0]}-wide split" if bad else None

    def shard(self, tp: int, expert_parallel: bool = False) -> Shard:
        """What one of `tp` ranks holds (assumes `indivisible` is None)."""
        if self.style is Style.QKV:
            return self._qkv_shard(tp)
        if self.style is Style.EXPERTS:
            return self._experts_shard(tp, expert_parallel)
        if self.style is Style.ROW:
            return Shard(self.in_features // tp, self.outputs, tp > 1, False)
        if self.style in _OUTPUT_SPLIT:  # (the LM head's vocabulary: vLLM pads it to 64 a rank)
            return Shard(self.in_features, tuple(o // tp for o in self.outputs), False, tp > 1)
        return Shard(self.in_features, self.outputs, False, False)  # replicated

    def _qkv_shard(self, tp: int) -> Shard:
        # linear.py QKVParallelLinear: one KV head per rank once TP ≥ KV heads (replicated)
        kv = 1 if tp >= self.kv_heads else self.kv_heads // tp
        q = self.heads // tp * self.head_size
        return Shard(
            self.in_features, (q, kv * self.head_size, kv * self.v_head_size), False, tp > 1
        )

    def _experts_shard(self, tp: int, expert_parallel: bool) -> Shard:
        if _moe_ep(tp, expert_parallel):
            # expert_map_manager.py determine_expert_map: E // EP each, the first E % EP ranks
            # one more; every expert whole
            return Shard(self.in_features, self.outputs, False, False, -(-self.experts // tp))
        width = self.outputs[0] // tp
        return Shard(self.in_features, (width, width), tp > 1, tp > 1, self.experts)


def _moe_ep(tp: int, expert_parallel: bool) -> bool:
    # FusedMoEParallelConfig.make: expert parallel only when there is more than one rank
    return expert_parallel and tp > 1


@dataclass(frozen=True)
class LayerKind:
    name: str  # "dense" (a dense MLP) or "moe" (routed experts)
    layers: int  # decoder layers of this kind
    linears: tuple[Linear, ...]


@dataclass(frozen=True)
class Linears:
    kinds: tuple[LayerKind, ...]
    lm_head: Linear

    @functools.cached_property
    def distinct(self) -> tuple[Linear, ...]:
        """Every distinct Linear of the decoder layers (attention appears in each kind once)."""
        seen: dict[Linear, None] = {}
        for kind in self.kinds:
            seen.update(dict.fromkeys(kind.linears))
        return tuple(seen)

    @functools.cached_property
    def has_experts(self) -> bool:
        return any(one.style is Style.EXPERTS for one in self.distinct)


def of(config: dict) -> Linears:
    """The Linears of `config` (computed once per distinct config)."""
    return _of(json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _of(text: str) -> Linears:
    config = json.loads(text)
    layers, moe = int(config["num_hidden_layers"]), architecture.moe_layers(config)
    attention = _attention(config)
    kinds = []
    if layers - moe:
        width = int(config.get("intermediate_size") or 4 * int(config["hidden_size"]))
        kinds.append(LayerKind("dense", layers - moe, attention + _mlp(config, "mlp", width)))
    if moe:
        kinds.append(LayerKind("moe", moe, attention + _moe(config)))
    hidden, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    head = Linear("lm_head", Style.VOCAB, hidden, (vocab,), ("lm_head",))
    return Linears(tuple(kinds), head)


def _attention(config: dict) -> tuple[Linear, ...]:
    if config.get("kv_lora_rank"):
        return _latent_attention(config)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    kv, hd = int(config.get("num_key_value_heads") or heads), architecture.head_dim(config)
    qkv = Linear(
        "self_attn.qkv_proj",
        Style.QKV,
        hidden,
        (heads * hd, kv * hd, kv * hd),
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        heads=heads,
        kv_heads=kv,
        head_size=hd,
        v_head_size=hd,
    )
    o = Linear("self_attn.o_proj", Style.ROW, heads * hd, (hidden,), ("self_attn.o_proj",))
    return (qkv, o)


def _latent_attention(config: dict) -> tuple[Linear, ...]:
    """DeepSeek's MLA as deepseek_v2.py DeepseekV2MLAAttention builds it."""
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    rank, rope = int(config["kv_lora_rank"]), int(config["qk_rope_head_dim"])
    nope, v = int(config["qk_nope_head_dim"]), int(config["v_head_dim"])
    q_rank = config.get("q_lora_rank")
    a, q = "self_attn.kv_a_proj_with_mqa", heads * (nope + rope)
    if q_rank:  # q_a_proj and kv_a_proj_with_mqa fused, replicated (disable_tp=True)
        fused = ("self_attn.q_a_proj", a)
        query = (
            Linear("self_attn.fused_qkv_a_proj", Style.MERGED_REPLICATED, hidden,
                   (int(q_rank), rank + rope), fused),
            Linear("self_attn.q_b_proj", Style.COLUMN, int(q_rank), (q,), ("self_attn.q_b_proj",)),
        )  # fmt: skip
    else:
        query = (
            Linear("self_attn.q_proj", Style.COLUMN, hidden, (q,), ("self_attn.q_proj",)),
            Linear(a, Style.REPLICATED, hidden, (rank + rope,), (a,)),
        )
    b = "self_attn.kv_b_proj"
    kv_b = Linear(b, Style.COLUMN, rank, (heads * (nope + v),), (b,))
    o = Linear("self_attn.o_proj", Style.ROW, heads * v, (hidden,), ("self_attn.o_proj",))
    return (*query, kv_b, o)


def _mlp(config: dict, prefix: str, width: int) -> tuple[Linear, ...]:
    hidden = int(config["hidden_size"])
    gate_up = (f"{prefix}.gate_proj", f"{prefix}.up_proj")
    return (
        Linear(f"{prefix}.gate_up_proj", Style.MERGED_COLUMN, hidden, (width, width), gate_up),
        Linear(f"{prefix}.down_proj", Style.ROW, width, (hidden,), (f"{prefix}.down_proj",)),
    )


def _moe(config: dict) -> tuple[Linear, ...]:
    """Routed experts, their router and any shared expert, as mixtral.py, qwen2_moe.py,
    qwen3_moe.py and deepseek_v2.py build them."""
    hidden, n = int(config["hidden_size"]), architecture.experts(config)
    prefix = "block_sparse_moe" if config.get("model_type") == "mixtral" else "mlp"
    width = int(config.get("moe_intermediate_size") or config["intermediate_size"])
    per_expert = tuple(f"{prefix}.experts.{p}" for p in ("gate_proj", "up_proj", "down_proj"))
    found = [
        # GateLinear: replicated; mixtral/qwen2_moe/deepseek_v2 build it without a quantization
        # config, and llm-compressor adds Qwen3-MoE's to `ignore`
        Linear(f"{prefix}.gate", Style.REPLICATED, hidden, (n,), (f"{prefix}.gate",), False),
        Linear(f"{prefix}.experts", Style.EXPERTS, hidden, (width, width), per_expert, experts=n),
    ]
    shared = int(config.get("shared_expert_intermediate_size") or 0)
    if shared:  # Qwen2-MoE: a TP-split MLP beside the experts, and its 1-wide gate (unquantized)
        found += _mlp(config, "mlp.shared_expert", shared)
        gate = "mlp.shared_expert_gate"
        found.append(Linear(gate, Style.REPLICATED, hidden, (1,), (gate,), False))
    if config.get("n_shared_experts"):  # DeepSeek: the shared experts fused into one TP MLP
        found += _mlp(config, "mlp.shared_experts", int(config["n_shared_experts"]) * width)
    return tuple(found)
