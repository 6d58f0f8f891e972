"""The config arithmetic (pipeline/models/architecture.py, which plan, --dry-run and serve's
predictions use without torch) against transformers' own models built on the meta device:
small configs of each family, dense and mixture-of-experts, tied and untied."""

import pytest

from pipeline.models import architecture

SMALL = {"vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 2}
SMALL |= {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}
FAMILIES = {
    "llama": {"intermediate_size": 768},
    "mistral": {"intermediate_size": 768, "sliding_window": 128},
    "qwen2": {"intermediate_size": 768, "tie_word_embeddings": True},
    "qwen3": {"intermediate_size": 768},
    "mixtral": {"intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {
        "intermediate_size": 768,
        "moe_intermediate_size": 128,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "mlp_only_layers": [1],
    },
    "qwen2_moe": {
        "intermediate_size": 768,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 2,
        "num_hidden_layers": 4,
    },
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_parameter_count_matches_transformers(family):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(family, **{**SMALL, **FAMILIES[family]})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    real = sum(p.numel() for p in model.parameters())  # a tied weight is counted once
    assert architecture.total_params(config.to_dict()) == real
