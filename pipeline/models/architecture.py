"""Tensor shapes of a decoder-only transformer, from its config.json alone (no weights, no torch).

Covers the Llama family (Llama, Mistral, Qwen2, Qwen3 with its q/k norms), DeepSeek's multi-head
latent attention (MLA: `kv_lora_rank`, optional `q_lora_rank`) and mixture-of-experts
feed-forwards: Mixtral (`num_local_experts`, `block_sparse_moe`), Qwen MoE (`num_experts`,
`moe_intermediate_size`, `decoder_sparse_step` / `mlp_only_layers`, Qwen2-MoE's shared expert)
and DeepSeek MoE (`n_routed_experts`, `n_shared_experts`, `first_k_dense_replace`).
Every expert counts: all of them are stored and loaded, though only `num_experts_per_tok` run.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Linear:
    name: str  # module name inside one decoder layer, or "lm_head"
    in_features: int
    out_features: int
    count: int  # how many such modules in the model

    @property
    def params(self) -> int:
        return self.in_features * self.out_features * self.count


def head_dim(config: dict) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def linears(config: dict) -> list[Linear]:
    return [
        *attention(config),
        *feed_forward(config),
        Linear("lm_head", config["hidden_size"], config["vocab_size"], 1),
    ]


def attention(config: dict) -> list[Linear]:
    hidden = config["hidden_size"]
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    if config.get("kv_lora_rank"):
        return _latent_attention(config, hidden, heads, layers)
    kv_heads = config.get("num_key_value_heads") or heads
    hd = head_dim(config)
    return [
        Linear("self_attn.q_proj", hidden, heads * hd, layers),
        Linear("self_attn.k_proj", hidden, kv_heads * hd, layers),
        Linear("self_attn.v_proj", hidden, kv_heads * hd, layers),
        Linear("self_attn.o_proj", heads * hd, hidden, layers),
    ]


def _latent_attention(config: dict, hidden: int, heads: int, layers: int) -> list[Linear]:
    """DeepSeek's MLA: K and V come from one compressed latent (kv_lora_rank) plus a shared
    rotary key; queries directly, or through their own low-rank latent (q_lora_rank)."""
    rank, rope = int(config["kv_lora_rank"]), int(config["qk_rope_head_dim"])
    nope, v = int(config["qk_nope_head_dim"]), int(config["v_head_dim"])
    q_rank = config.get("q_lora_rank")
    query = (
        [
            Linear("self_attn.q_a_proj", hidden, q_rank, layers),
            Linear("self_attn.q_b_proj", q_rank, heads * (nope + rope), layers),
        ]
        if q_rank
        else [Linear("self_attn.q_proj", hidden, heads * (nope + rope), layers)]
    )
    return [
        *query,
        Linear("self_attn.kv_a_proj_with_mqa", hidden, rank + rope, layers),
        Linear("self_attn.kv_b_proj", rank, heads * (nope + v), layers),
        Linear("self_attn.o_proj", heads * v, hidden, layers),
    ]


def experts(config: dict) -> int:
    """Routed experts per MoE layer (0: a dense model)."""
    found = config.get("num_local_experts") or config.get("num_experts")
    return int(found or config.get("n_routed_experts") or 0)


def moe_layers(config: dict) -> int:
    """Decoder layers whose feed-forward is a mixture of experts."""
    layers = config["num_hidden_layers"]
    if not experts(config):
        return 0
    if "first_k_dense_replace" in config:  # DeepSeek: dense first, then every freq-th layer
        first, freq = config["first_k_dense_replace"], config.get("moe_layer_freq") or 1
        return sum(1 for i in range(first, layers) if i % freq == 0)
    step = int(config.get("decoder_sparse_step") or 1)
    dense = set(config.get("mlp_only_layers") or [])
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def feed_forward(config: dict) -> list[Linear]:
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    sparse = moe_layers(config)
    found = _mlp("mlp", hidden, config["intermediate_size"], layers - sparse)
    if sparse:
        n = experts(config)
        prefix = "block_sparse_moe" if config.get("model_type") == "mixtral" else "mlp"
        width = int(config.get("moe_intermediate_size") or config["intermediate_size"])
        found += _mlp(f"{prefix}.experts", hidden, width, sparse * n)
        found.append(Linear(f"{prefix}.gate", hidden, n, sparse))  # the router
        shared = int(config.get("shared_expert_intermediate_size") or 0)
        if shared:  # Qwen2-MoE: one always-on expert beside the routed ones, and its gate
            found += _mlp("mlp.shared_expert", hidden, shared, sparse)
            found.append(Linear("mlp.shared_expert_gate", hidden, 1, sparse))
        if config.get("n_shared_experts"):  # DeepSeek: always-on experts fused into one MLP
            fused = int(config["n_shared_experts"]) * width
            found += _mlp("mlp.shared_experts", hidden, fused, sparse)
    return found


def is_router(lin: Linear) -> bool:
    return lin.name.endswith((".gate", "shared_expert_gate"))


def _mlp(prefix: str, hidden: int, width: int, count: int) -> list[Linear]:
    if count == 0:
        return []
    return [
        Linear(f"{prefix}.gate_proj", hidden, width, count),
        Linear(f"{prefix}.up_proj", hidden, width, count),
        Linear(f"{prefix}.down_proj", width, hidden, count),
    ]


def other_params(config: dict) -> int:
    """Parameters outside the Linear layers: embeddings, norms, biases."""
    hidden = config["hidden_size"]
    layers = config["num_hidden_layers"]
    embed = config["vocab_size"] * hidden
    norms = (2 * layers + 1) * hidden
    if config.get("model_type") in ("qwen3", "qwen3_moe"):
        norms += 2 * head_dim(config) * layers  # q_norm and k_norm
    if config.get("kv_lora_rank"):  # MLA normalizes its latents
        norms += (int(config["kv_lora_rank"]) + int(config.get("q_lora_rank") or 0)) * layers
    # (DeepSeek-V3's router score-correction bias, one per expert, is a buffer in transformers
    # 5.17, not a parameter: 14,848 values in all, left out like its other buffers)
    bias = 0
    gqa_bias = config.get("attention_bias") and not config.get("kv_lora_rank")
    if config.get("model_type") in ("qwen2", "qwen2_moe") or gqa_bias:
        q, k, v = attention(config)[:3]
        bias = (q.out_features + k.out_features + v.out_features) * layers
    return embed + norms + bias


def total_params(config: dict) -> int:
    tied = config.get("tie_word_embeddings", False)
    lin = sum(lin.params for lin in linears(config) if not (tied and lin.name == "lm_head"))
    return lin + other_params(config)


def per_layer(lin: Linear, config: dict) -> int:
    """How many of this Linear the largest decoder layer holds (a MoE layer: every expert)."""
    if lin.name == "lm_head":
        return 0
    if ".experts." in lin.name:
        return experts(config)
    dense_mlp = lin.name in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    return 0 if dense_mlp and moe_layers(config) else 1  # a MoE layer outweighs a dense one


def decoder_layer_params(config: dict) -> int:
    """Parameters of the largest decoder layer: what sequential onloading puts on the device."""
    lin = sum(x.in_features * x.out_features * per_layer(x, config) for x in linears(config))
    return lin + 2 * config["hidden_size"]
