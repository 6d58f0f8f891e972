"""What the KV cache holds, per layer kind, from config.json alone, as vLLM 0.32 allocates it.

  full attention (GQA/MQA/MHA)  K and V: 2 × KV heads × head_dim elements per token per layer;
                                a sequence keeps every token (in blocks of 16)
  sliding window                the same per token, but vLLM keeps at most the window − 1 tokens
                                plus the tokens it schedules in one step (max_num_batched_tokens)
                                per sequence, plus one block (a window starts mid-block):
                                SlidingWindowSpec.max_admission_blocks_per_request
  MLA (DeepSeek-V2/V3, Kimi)    one compressed latent, kv_lora_rank + qk_rope_head_dim elements
                                per token per layer, no separate V, the same on every TP rank
  not modelled                  linear attention / Mamba layers (a fixed-size recurrent state per
                                sequence, which vLLM sizes differently): named, not counted

Under tensor parallelism vLLM splits KV heads across ranks and replicates them when there are
more ranks than KV heads; MLA's single latent is replicated on every rank.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.models import architecture

BLOCK_TOKENS = 16  # vLLM's default block size on GPUs
ATTENTION = {"full_attention", "attention", "sliding_attention"}


@dataclass(frozen=True)
class LayerGroup:
    kind: str  # "full", "sliding", "mla" or the config's name for a layer not modelled
    layers: int
    elements: int  # KV elements per token per layer on one GPU at TP 1 (0: not modelled)
    kv_heads: int = 1  # what tensor parallelism splits (MLA: 1, replicated)
    window: int | None = None

    @property
    def modelled(self) -> bool:
        return self.elements > 0

    def elements_per_rank(self, tp: int) -> int:
        if self.kind == "mla":
            return self.elements
        heads_per_rank = max(1, self.kv_heads // tp)  # vLLM replicates when tp > KV heads
        return self.elements // self.kv_heads * heads_per_rank

    def tokens_kept(self, context: int, scheduled: int, block: int = BLOCK_TOKENS) -> int:
        """Tokens of one `context`-long sequence this group holds at once, in whole blocks
        (a window may start mid-block: vLLM adds one)."""
        if self.window is None:
            return -(-context // block) * block
        held = min(context, self.window - 1 + scheduled)
        return (-(-held // block) + 1) * block


def layer_kinds(config: dict) -> list[str]:
    """Each decoder layer's attention kind: transformers' `layer_types` names where the config
    has them, else the model-level sliding window that vLLM applies to every layer."""
    n = config["num_hidden_layers"]
    if config.get("layer_types"):
        return list(config["layer_types"])[:n]
    if config.get("layers_block_type"):  # Granite-4 hybrid, Nemotron-H: "mamba" | "attention"
        return list(config["layers_block_type"])[:n]
    if config.get("attn_layer_period"):  # Jamba: attention every period-th layer, else Mamba
        period, offset = config["attn_layer_period"], config.get("attn_layer_offset", 0)
        return ["attention" if i % period == offset else "mamba" for i in range(n)]
    if window(config) is None:
        return ["full_attention"] * n
    first = int(config.get("max_window_layers") or 0) if config.get("use_sliding_window") else 0
    return ["full_attention" if i < first else "sliding_attention" for i in range(n)]


def window(config: dict) -> int | None:
    """The sliding window in tokens, or None (Qwen's configs carry one they do not use)."""
    if config.get("use_sliding_window") is False:
        return None
    return config.get("sliding_window") or None


def groups(config: dict) -> list[LayerGroup]:
    kinds = layer_kinds(config)
    kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    if config.get("kv_lora_rank"):
        latent = int(config["kv_lora_rank"]) + int(config.get("qk_rope_head_dim") or 0)
        found = {"mla": LayerGroup("mla", 0, latent)}
    else:
        per_token = 2 * kv_heads * architecture.head_dim(config)
        found = {
            "full": LayerGroup("full", 0, per_token, kv_heads),
            "sliding": LayerGroup("sliding", 0, per_token, kv_heads, window(config)),
        }
    counts: dict[str, int] = {}
    for kind in kinds:
        key = kind if kind not in ATTENTION else "mla" if "mla" in found else _short(kind)
        counts[key] = counts.get(key, 0) + 1
    return [
        _with_layers(found.get(key) or LayerGroup(key, 0, 0), layers)
        for key, layers in counts.items()
    ]


def bytes_per_token(config: dict, element_bytes: int, tp: int = 1) -> int:
    return token_bytes(groups(config), element_bytes, tp)


def token_bytes(found: Iterable[LayerGroup], element_bytes: int, tp: int = 1) -> int:
    """KV bytes one token adds on one GPU across every modelled layer."""
    return sum(g.layers * g.elements_per_rank(tp) * element_bytes for g in found)


def bytes_per_sequence(
    config: dict,
    element_bytes: int,
    context: int,
    scheduled: int,
    tp: int = 1,
    block: int = BLOCK_TOKENS,
) -> int:
    return sequence_bytes(groups(config), element_bytes, context, scheduled, tp, block)


def sequence_bytes(
    found: Iterable[LayerGroup],
    element_bytes: int,
    context: int,
    scheduled: int,
    tp: int = 1,
    block: int = BLOCK_TOKENS,
) -> int:
    """KV bytes a `context`-token sequence holds on one GPU (sliding layers: their window)."""
    return sum(
        g.layers
        * g.elements_per_rank(tp)
        * element_bytes
        * g.tokens_kept(context, scheduled, block)
        for g in found
    )


def describe(config: dict) -> str:
    """Which layers the KV figures model, and which they leave out."""
    parts, left_out = [], []
    for g in groups(config):
        if not g.modelled:
            left_out.append(f"{g.layers} {g.kind} layers (fixed-size state)")
        elif g.kind == "mla":
            parts.append(
                f"{g.layers} MLA layers ({g.elements} latent elements per token, not split by TP)"
            )
        else:
            shape = f"{g.kv_heads} KV heads × {g.elements // g.kv_heads // 2}"
            where = f", window {g.window:,} tokens" if g.kind == "sliding" else ""
            parts.append(f"{g.layers} {g.kind}-attention layers ({shape}{where})")
    line = "KV modelled: " + "; ".join(parts or ["none"])
    return line + (f"; not modelled: {', '.join(left_out)}" if left_out else "")


def _short(kind: str) -> str:
    return "sliding" if kind == "sliding_attention" else "full"


def _with_layers(group: LayerGroup, layers: int) -> LayerGroup:
    return LayerGroup(group.kind, layers, group.elements, group.kv_heads, group.window)
