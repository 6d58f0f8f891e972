"""A model's shape as every planner reads it, computed once from its config.json: the heads vLLM
splits across tensor-parallel ranks, the experts, the parameters and the bytes it ships in.

    g = geometry.of(config)
    g.heads, g.kv_heads, g.experts, g.original_bytes
    g.linears  # each Linear as vLLM fuses and splits it across TP ranks (planning/linears.py)

The arithmetic behind it stays where it is (models/architecture.py: the Linears; kv_layout.py:
the KV cache per layer kind; planning/shipped.py: the format an original ships in); this is the
one place that reads those figures off a config, so two planners cannot read them differently.
"""

import functools
import json
from dataclasses import dataclass

from pipeline.models import architecture, kv_layout
from pipeline.planning import linears as vllm_linears
from pipeline.planning import shipped


@dataclass(frozen=True)
class Geometry:
    layers: int
    hidden: int
    intermediate: int  # the dense MLP's width (an MoE's dense layers; its experts are narrower)
    heads: int  # attention (query) heads
    kv_heads: int  # as vLLM splits them across TP ranks (latent attention: 1, replicated)
    latent_attention: bool  # DeepSeek's MLA: one compressed latent instead of K and V heads
    attention_dim: int  # q·k width a head attends with (MLA: latent rank + rotary dims)
    vocab: int
    experts: int  # routed experts per MoE layer (0: a dense model)
    active_experts: int  # of them, what each token runs
    params: int  # every parameter, as transformers counts them
    original_bytes: int  # the weights vLLM loads for the original, as they ship
    shipped: str  # "16-bit" | "FP8 in 128 × 128 blocks (as shipped)"
    max_position: int | None  # max_position_embeddings
    kv_modelled: str  # which layers the KV figures model (kv_layout.describe)
    linears: vllm_linears.Linears  # as vLLM fuses and splits them (layout.py checks them)


def of(config: dict) -> Geometry:
    """The geometry of `config` (computed once per distinct config)."""
    return _of(json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _of(text: str) -> Geometry:
    config = json.loads(text)
    latent = bool(config.get("kv_lora_rank"))
    heads = int(config["num_attention_heads"])
    if latent:
        kv_heads = 1  # vLLM's get_num_kv_heads for MLA
        attention_dim = int(config["kv_lora_rank"]) + int(config["qk_rope_head_dim"])
    else:
        kv_heads = int(config.get("num_key_value_heads") or heads)
        attention_dim = architecture.head_dim(config)
    longest = config.get("max_position_embeddings")
    return Geometry(
        layers=int(config["num_hidden_layers"]),
        hidden=int(config["hidden_size"]),
        intermediate=int(config.get("intermediate_size") or 4 * int(config["hidden_size"])),
        heads=heads,
        kv_heads=kv_heads,
        latent_attention=latent,
        attention_dim=attention_dim,
        vocab=int(config["vocab_size"]),
        experts=architecture.experts(config),
        active_experts=int(config.get("num_experts_per_tok") or 0),
        params=architecture.total_params(config),
        original_bytes=shipped.original_bytes(config),
        shipped=shipped.describe(config),
        max_position=int(longest) if longest else None,
        kv_modelled=kv_layout.describe(config),
        linears=vllm_linears.of(config),
    )
