"""Parameter arithmetic from a config: tied embeddings and attention biases counted right."""

from pipeline.models import architecture
from pipeline.models.tiny import spec
from pipeline.planning import geometry


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


def _mixtral() -> dict:
    from pipeline.models import aliases

    return aliases.load_config(aliases.resolve("mixtral-8x7b"))


def test_mixtral_arithmetic_written_out():
    """32 layers × (attention + 8 experts of 3 × 4096 × 14336 + router) + embeddings + norms."""
    c = _mixtral()
    attention = 4096 * 4096 * 2 + 4096 * 1024 * 2
    moe = 8 * 3 * 4096 * 14336 + 4096 * 8
    layer = attention + moe + 2 * 4096
    assert architecture.total_params(c) == 32 * layer + 2 * 32000 * 4096 + 4096
    assert architecture.decoder_layer_params(c) == layer  # every expert is onloaded together
    names = {lin.name for lin in architecture.linears(c)}
    assert "block_sparse_moe.experts.gate_proj" in names and "mlp.gate_proj" not in names


def test_qwen_moe_sparse_layers_follow_step_and_mlp_only_layers():
    c = {**spec.CONFIG, "num_experts": 8, "moe_intermediate_size": 128, "num_hidden_layers": 6}
    assert architecture.moe_layers(c) == 6
    assert architecture.moe_layers({**c, "decoder_sparse_step": 2}) == 3  # layers 1, 3, 5
    assert architecture.moe_layers({**c, "mlp_only_layers": [0, 5]}) == 4
    assert architecture.moe_layers(spec.CONFIG) == 0
    lins = {lin.name: lin for lin in architecture.linears({**c, "mlp_only_layers": [0, 5]})}
    assert lins["mlp.gate_proj"].count == 2 and lins["mlp.experts.gate_proj"].count == 4 * 8
    assert lins["mlp.gate"].out_features == 8  # the router


def test_plan_of_a_moe_counts_every_expert():
    from pipeline.planning import capacity
    from pipeline.planning.gpus import named

    rows = capacity.plan(geometry.of(_mixtral()), [], ["auto"], 100, 4000, named("H100-80GB"))
    assert rows[0].weights_bytes == 2 * 46_702_792_704 and rows[0].gpus == 2  # 87 GiB: not one
