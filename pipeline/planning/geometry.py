"""A model's shape as every planner reads it, computed once from its config.json: the heads vLLM
splits across tensor-parallel ranks, the experts, the parameters, the bytes it ships in, the KV
cache per layer kind, and every Linear as vLLM fuses and splits it.

    g = geometry.of(config)            # or geometry.of_model(ref)
    g.heads, g.kv_heads, g.experts, g.original_bytes
    g.linears                          # each Linear as vLLM splits it (planning/linears.py)
    g.checkpoint_linears               # … as the checkpoint names them (models/architecture.py)

This and models/ are the only code that reads a config dict: every planner takes the Geometry,
so two planners cannot read a figure differently. The arithmetic of widths stays in
models/architecture.py and models/kv_layout.py; this module adds how vLLM fuses them.
"""

import functools
import json
from dataclasses import replace

from pipeline.config import recipe
from pipeline.models import aliases, architecture, checkpoint, kv_layout
from pipeline.planning.linears import LayerKind, Linear, Linears, Style
from pipeline.planning.shape import Geometry  # defined there, imported from here by planners
from pipeline.planning.weights import artifact_bytes


def of(config: dict) -> Geometry:
    """The geometry of `config` (computed once per distinct config)."""
    return _of(json.dumps(config, sort_keys=True))


def of_model(ref: aliases.ModelRef) -> Geometry:
    """The geometry of a resolved model (its config.json, read once)."""
    return of(aliases.load_config(ref))


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
    named = tuple(architecture.linears(config))
    params = architecture.total_params(config)
    found = Geometry(
        layers=int(config["num_hidden_layers"]),
        hidden=int(config["hidden_size"]),
        intermediate=int(config.get("intermediate_size") or 4 * int(config["hidden_size"])),
        heads=heads,
        kv_heads=kv_heads,
        latent_attention=latent,
        attention_dim=attention_dim,
        head_dim=architecture.head_dim(config),
        vocab=int(config["vocab_size"]),
        vocab_matrices=1 if config.get("tie_word_embeddings", False) else 2,
        experts=architecture.experts(config),
        active_experts=int(config.get("num_experts_per_tok") or 0),
        moe_layers=architecture.moe_layers(config),
        params=params,
        other_params=architecture.other_params(config),
        decoder_layer_params=architecture.decoder_layer_params(config),
        original_bytes=params * 2,
        fp8_blocks=checkpoint.fp8_blocks(config),
        dtype=checkpoint.dtype_name(config),
        max_position=int(longest) if longest else None,
        kv_groups=tuple(kv_layout.groups(config)),
        kv_modelled=kv_layout.describe(config),
        checkpoint_linears=named,
        largest_layer=tuple((lin, architecture.per_layer(lin, config)) for lin in named),
        linears=_linears(config),
    )
    if found.fp8_blocks:  # vLLM serves it in its shipped format: count that
        # the shipped fp8-block recipe: FP8 Linears in 128 × 128 blocks, lm_head in 16 bits
        found = replace(found, original_bytes=artifact_bytes(recipe.load("fp8-block"), found))
    return found


# vLLM's Linears (planning/linears.py says how it fuses and splits each)


def _linears(config: dict) -> Linears:
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
