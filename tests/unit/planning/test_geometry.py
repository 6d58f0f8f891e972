"""A model's geometry read once from its config: known answers for a dense GQA model, a
mixture of experts and latent attention shipped in FP8 blocks."""

import pytest

from pipeline.models import aliases, architecture
from pipeline.planning import geometry

GIB = 2**30


def _config(alias: str) -> dict:
    return aliases.load_config(aliases.resolve(alias))


def test_llama3_70b():
    g = geometry.of(_config("llama3-70b"))
    assert (g.layers, g.hidden, g.heads, g.kv_heads, g.vocab) == (80, 8192, 64, 8, 128_256)
    assert not g.latent_attention and g.attention_dim == 128 and g.experts == 0
    assert g.params == 70_553_706_496 and g.original_bytes == 2 * g.params
    assert g.shipped == "16-bit" and g.max_position == 8192


def test_mixtral_routes_two_of_eight_experts():
    g = geometry.of(_config("mixtral-8x7b"))
    assert (g.experts, g.active_experts, g.heads, g.kv_heads) == (8, 2, 32, 8)


def test_deepseek_v3_attends_in_its_latent_and_ships_fp8_blocks():
    config = _config("deepseek-v3")
    g = geometry.of(config)
    assert g.latent_attention and g.kv_heads == 1  # vLLM replicates the latent on every rank
    assert g.attention_dim == 512 + 64  # kv_lora_rank + qk_rope_head_dim
    assert (g.experts, g.active_experts) == (256, 8)
    assert g.params == architecture.total_params(config) == 671_026_404_352
    assert g.original_bytes / GIB == pytest.approx(626.8, abs=0.1)
    assert g.shipped == "FP8 in 128 × 128 blocks (as shipped)"


def test_computed_once_per_config_and_blind_to_key_order():
    config = _config("llama3-8b")
    again = dict(reversed(list(config.items())))
    assert geometry.of(config) is geometry.of(again)


def test_a_cpu_engine_counts_each_vocabulary_matrix_twice():
    """vLLM's CPU build keeps embed_tokens' and lm_head's weights beside their packed copies;
    a tied model has one such matrix."""
    from pipeline.engines.vllm import engine_plan

    config = _config("llama3-8b")
    untied, tied = geometry.of(config), geometry.of({**config, "tie_word_embeddings": True})
    assert (untied.vocab_matrices, tied.vocab_matrices) == (2, 1)
    one_matrix = 128_256 * 4096 * 2
    weights = untied.original_bytes
    extra = engine_plan.CPU_KV_POOL + engine_plan.CPU_ENGINE_RUNTIME
    assert engine_plan.cpu_engine_bytes(untied, weights) == weights + 2 * one_matrix + extra
    assert engine_plan.cpu_engine_bytes(tied, weights) == weights + one_matrix + extra
