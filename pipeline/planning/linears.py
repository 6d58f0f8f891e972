"""A model's Linears as vLLM 0.32 builds and splits them (no torch).

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

    lin = geometry.of(config).linears   # read off the config in planning/geometry.py
    for kind in lin.kinds:              # "dense" and/or "moe" decoder layers
        for one in kind.linears: one.name, one.style, one.shard(tp=8)

planning/geometry.py reads them off the config (the arithmetic of widths: models/architecture.py);
this module says how vLLM splits each.
"""

import enum
import functools
from dataclasses import dataclass


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
