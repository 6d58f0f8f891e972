"""KV cache per layer kind, as vLLM 0.32 allocates it (pipeline/models/kv_layout.py)."""

from pipeline.models import aliases, kv_layout
from pipeline.planning import capacity as planner
from pipeline.planning import geometry, kv_cache
from pipeline.planning.gpus import named

GIB = 2**30


def _config(alias: str, **changes) -> dict:
    return {**aliases.load_config(aliases.resolve(alias)), **changes}


def test_full_attention_keeps_every_token_in_blocks_of_16():
    config = _config("llama3-8b")  # 32 layers × 8 KV heads × 128, K and V
    assert kv_layout.bytes_per_token(config, 2) == 32 * 2 * 8 * 128 * 2 == 131_072
    assert kv_layout.bytes_per_sequence(config, 2, 1000, 8192) == 131_072 * 1008  # 63 blocks
    assert kv_layout.describe(config) == "KV modelled: 32 full-attention layers (8 KV heads × 128)"


def test_a_sliding_window_keeps_the_window_plus_one_step_of_scheduled_tokens():
    # Mistral 7B v0.1: every layer attends through a 4,096-token window
    config = _config("mistral-7b", sliding_window=4096)
    per_token = kv_layout.bytes_per_token(config, 2)
    # vLLM: min(window − 1 + max_num_batched_tokens, context) in blocks, + 1 block (a window
    # may start mid-block)
    assert kv_layout.bytes_per_sequence(config, 2, 32_000, 8192) == per_token * (768 + 1) * 16
    assert kv_layout.bytes_per_sequence(config, 2, 32_000, 2048) == per_token * (384 + 1) * 16
    assert kv_layout.bytes_per_sequence(config, 2, 8_000, 8192) == per_token * (500 + 1) * 16
    assert "32 sliding-attention layers (8 KV heads × 128, window 4,096 tokens)" in (
        kv_layout.describe(config)
    )


def test_qwen_configs_carry_a_window_they_do_not_use():
    config = _config("qwen2.5-7b")  # sliding_window 131072, use_sliding_window false
    assert kv_layout.layer_kinds(config) == ["full_attention"] * 28
    on = {**config, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    kinds = kv_layout.layer_kinds(on)
    assert kinds[:20] == ["full_attention"] * 20 and kinds[20:] == ["sliding_attention"] * 8


def test_alternating_layer_types_are_two_groups():
    # gpt-oss / Gemma style: transformers' layer_types name each layer's attention
    types = ["sliding_attention", "full_attention"] * 12
    config = _config("llama3-8b", num_hidden_layers=24, layer_types=types, sliding_window=128)
    full, sliding = sorted(kv_layout.groups(config), key=lambda g: g.kind)
    assert (full.kind, full.layers, sliding.kind, sliding.layers) == ("full", 12, "sliding", 12)
    per_layer = 2 * 8 * 128 * 2
    expected = 12 * per_layer * 32_000 + 12 * per_layer * (520 + 1) * 16  # 127 + 8192: 520
    assert kv_layout.bytes_per_sequence(config, 2, 32_000, 8192) == expected


def test_mla_stores_one_latent_per_token_on_every_rank():
    config = _config("deepseek-v2-lite")  # 27 layers, kv_lora_rank 512 + rope 64
    assert kv_layout.bytes_per_token(config, 2) == 27 * 576 * 2 == 31_104
    assert kv_layout.bytes_per_token(config, 2, tp=4) == 31_104  # replicated, not split
    assert kv_layout.describe(config).startswith("KV modelled: 27 MLA layers (576 latent")


def test_kv_heads_split_across_ranks_then_replicate():
    config = _config("llama3-70b")  # 8 KV heads
    one = kv_layout.bytes_per_token(config, 2)
    assert kv_layout.bytes_per_token(config, 2, tp=8) == one // 8
    assert kv_layout.bytes_per_token(config, 2, tp=16) == one // 8  # one head per rank still


def test_recurrent_layers_are_named_not_counted():
    types = ["linear_attention"] * 3 + ["full_attention"]  # Qwen3-Next: 3 of every 4 layers
    config = _config("qwen3-8b", num_hidden_layers=8, layer_types=types * 2)
    assert kv_layout.bytes_per_token(config, 2) == 2 * 2 * 8 * 128 * 2
    line = kv_layout.describe(config)
    assert "2 full-attention layers" in line
    assert line.endswith("not modelled: 6 linear_attention layers (fixed-size state)")
    jamba = _config("llama3-8b", attn_layer_period=8, attn_layer_offset=4)
    assert kv_layout.layer_kinds(jamba).count("attention") == 4  # layers 4, 12, 20, 28


def test_the_planner_fits_more_users_through_a_window():
    full = _config("mistral-7b")
    windowed = {**full, "sliding_window": 4096}
    gpu = named("H100-80GB")
    assert gpu.scheduled_tokens == 8192 and named("A100-80GB").scheduled_tokens == 2048
    a, b = (
        planner.plan(geometry.of(c), [], ["auto"], 10, 32_000, gpu)[0] for c in (full, windowed)
    )
    sequence = kv_layout.bytes_per_sequence(windowed, 2, 32_000, 8192)
    assert b.gpus == a.gpus == 1 and b.max_users == b.kv_room_bytes // sequence
    assert b.max_users > 2.5 * a.max_users  # 32,000 tokens kept vs 12,304
    # DeepSeek-V2-Lite, 8,000 tokens each: 30.4 KiB per token on every rank. 200 users need
    # 46.3 GiB per GPU: TP 2 frees enough weight room (69.7 − 29.3 / 2 GiB); 400 users' 92.7
    # GiB fit on no number of H100s in one node (the latent is on every rank, where split KV
    # heads would divide): two nodes' pipeline stages each keep half the layers' KV
    rows = [planner.plan(geometry.of(_config("deepseek-v2-lite")), [], ["auto"], n, 8000, gpu)[0]
            for n in (200, 400)]  # fmt: skip
    assert [(r.gpus, r.tp, r.pp) for r in rows] == [(2, 2, 1), (16, 8, 2)]


def test_the_kv_cache_size_vllm_logs_is_requests_admitted_times_max_model_len():
    """vLLM 0.32 logs num_blocks / blocks one request may hold × max_model_len: a zoo Mistral
    (2 layers × 2 KV heads × 64, window 128) in a 1 GiB CPU pool of 128-token blocks, 1,024
    tokens per request, logged 932,067 tokens (910.22×); full attention logs the pool's tokens."""
    config = {**_config("mistral-7b"), "num_hidden_layers": 2, "num_key_value_heads": 2}
    config |= {"head_dim": 64, "num_attention_heads": 4, "hidden_size": 256}
    windowed = {**config, "sliding_window": 128}
    assert kv_cache.kv_tokens(2**30, geometry.of(windowed), "auto", 1024, 128, 2048) == 932_067
    assert kv_cache.kv_tokens(2**30, geometry.of(config), "auto", 1024, 128, 2048) == 2**30 // 1024
