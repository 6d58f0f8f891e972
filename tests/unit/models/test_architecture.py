"""Parameter arithmetic from a config: tied embeddings and attention biases counted right."""

from pipeline.models import architecture
from pipeline.models.tiny import spec


def test_tied_embeddings_count_the_lm_head_once():
    untied = architecture.total_params(spec.CONFIG)
    tied = architecture.total_params({**spec.CONFIG, "tie_word_embeddings": True})
    assert untied - tied == spec.CONFIG["vocab_size"] * spec.CONFIG["hidden_size"]


def test_qkv_biases_for_qwen2_and_attention_bias():
    base = architecture.total_params(spec.CONFIG)
    q, k, v = (lin.out_features for lin in architecture.linears(spec.CONFIG)[:3])
    bias = (q + k + v) * spec.CONFIG["num_hidden_layers"]
    assert architecture.total_params({**spec.CONFIG, "model_type": "qwen2"}) == base + bias
    assert architecture.total_params({**spec.CONFIG, "attention_bias": True}) == base + bias


def test_head_dim_defaults_to_hidden_over_heads():
    config = {k: v for k, v in spec.CONFIG.items() if k != "head_dim"}
    assert architecture.head_dim(config) == 256 // 4
    assert architecture.head_dim({**config, "num_key_value_heads": None}) == 64
    lins = {lin.name: lin for lin in architecture.linears({**config, "num_key_value_heads": None})}
    assert lins["self_attn.k_proj"].out_features == 256  # no GQA: as many KV heads as heads
