"""The config arithmetic (pipeline/models/architecture.py, which plan, --dry-run and serve's
predictions use without torch) against transformers' own models built on the meta device:
small configs of each family, dense and mixture-of-experts, tied and untied, MLA; and every
alias's shipped config at full size."""

import pytest

from pipeline.models import aliases, architecture

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
    "deepseek_v2": {  # MLA with direct queries, dense first layer, 2 shared experts
        "intermediate_size": 768,
        "kv_lora_rank": 128,
        "q_lora_rank": None,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "n_routed_experts": 8,
        "n_shared_experts": 2,
        "moe_intermediate_size": 128,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "num_hidden_layers": 3,
    },
    "deepseek_v3": {  # low-rank queries, the router's score-correction bias
        "intermediate_size": 768,
        "kv_lora_rank": 128,
        "q_lora_rank": 192,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 128,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "num_hidden_layers": 3,
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


@pytest.mark.parametrize("alias", list(aliases.ALIASES))
def test_full_size_alias_counts_match_transformers(alias):
    """On the meta device: no memory, so a 70B or a 46.7B MoE builds in seconds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shipped = aliases.load_config(aliases.resolve(alias))
    fields = {k: v for k, v in shipped.items() if k not in ("model_type", "architectures")}
    config = AutoConfig.for_model(shipped["model_type"], **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    real = sum(p.numel() for p in model.parameters())
    assert architecture.total_params(shipped) == real
