"""Tensor shapes of a decoder-only transformer, from its config.json alone (no weights, no torch).

Covers the Llama family (Llama, Mistral, Qwen2): the architectures the aliases name.
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
    hidden = config["hidden_size"]
    inter = config["intermediate_size"]
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    hd = head_dim(config)
    return [
        Linear("self_attn.q_proj", hidden, heads * hd, layers),
        Linear("self_attn.k_proj", hidden, kv_heads * hd, layers),
        Linear("self_attn.v_proj", hidden, kv_heads * hd, layers),
        Linear("self_attn.o_proj", heads * hd, hidden, layers),
        Linear("mlp.gate_proj", hidden, inter, layers),
        Linear("mlp.up_proj", hidden, inter, layers),
        Linear("mlp.down_proj", inter, hidden, layers),
        Linear("lm_head", hidden, config["vocab_size"], 1),
    ]


def other_params(config: dict) -> int:
    """Parameters outside the Linear layers: embeddings, norms, biases."""
    hidden = config["hidden_size"]
    layers = config["num_hidden_layers"]
    embed = config["vocab_size"] * hidden
    norms = (2 * layers + 1) * hidden
    bias = 0
    if config.get("model_type") == "qwen2" or config.get("attention_bias"):
        q, k, v = linears(config)[:3]
        bias = (q.out_features + k.out_features + v.out_features) * layers
    return embed + norms + bias


def total_params(config: dict) -> int:
    tied = config.get("tie_word_embeddings", False)
    lin = sum(lin.params for lin in linears(config) if not (tied and lin.name == "lm_head"))
    return lin + other_params(config)


def decoder_layer_params(config: dict) -> int:
    return (
        sum(lin.params for lin in linears(config) if lin.name != "lm_head")
        // config["num_hidden_layers"]
        + 2 * config["hidden_size"]
    )
