"""The layout rule (planning/layout.py) on the bundled configs: where a scheme's blocks or groups
straddle vLLM's tensor-parallel shards, and the Linears it reads them from (linears.py)."""

import json

import pytest

from pipeline.config import recipe
from pipeline.config.schemes import PRESETS
from pipeline.models import aliases
from pipeline.planning import geometry, layout, linears, parallel
from pipeline.planning.linears import Style

CONFIGS = sorted(aliases.CONFIGS_DIR.glob("*.json"))


def _config(alias: str) -> dict:
    return aliases.load_config(aliases.resolve(alias))


def _by_name(config: dict) -> dict[str, linears.Linear]:
    return {one.name: one for one in geometry.of(config).linears.distinct}


def test_qwen3_30b_a3b_fp8_block_at_tp8_is_refused_and_loads_with_expert_parallel():
    g = geometry.of(_config("qwen3-30b-a3b"))
    block = PRESETS["FP8_BLOCK"]
    said = layout.refusal(g, block, tp=8, label="fp8-block")
    assert said == (
        "TP 8 slices the 768-wide experts (mlp.experts) into 96: fp8-block's 128-wide blocks "
        "straddle them; expert parallel (--enable-expert-parallel) loads"
    )
    assert layout.refusal(g, block, tp=8, expert_parallel=True) is None
    assert layout.refusal(g, block, tp=2) is None  # 384 per rank: three whole blocks


def test_qwen3_30b_a3b_gptq_is_refused_at_tp8_and_loads_at_tp2_or_with_expert_parallel():
    config, gptq = _config("qwen3-30b-a3b"), recipe.load("gptq")
    said = layout.recipe_refusal(geometry.of(config), gptq, tp=8)
    assert said is not None and "96" in said and "gptq's groups of 128" in said
    assert "--enable-expert-parallel" in said
    assert layout.recipe_refusal(geometry.of(config), gptq, tp=2) is None
    assert layout.recipe_refusal(geometry.of(config), gptq, tp=8, expert_parallel=True) is None


def test_llama3_70b_fp8_block_loads_at_tp8():
    g = geometry.of(_config("llama3-70b"))
    assert layout.refusal(g, PRESETS["FP8_BLOCK"], tp=8) is None
    assert (
        layout.recipe_refusal(geometry.of(_config("llama3-70b")), recipe.load("fp8-block"), tp=8)
        is None
    )


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_per_channel_and_per_tensor_schemes_load_at_every_tp_vllm_accepts(path):
    config = json.loads(path.read_text())
    g = geometry.of(config)
    for tp in parallel.tensor_parallel_sizes(geometry.of(config), 8):
        for ep in (False, True) if g.experts else (False,):
            for name in ("FP8_DYNAMIC", "FP8", "W8A8"):
                assert layout.refusal(g, PRESETS[name], tp, ep) is None, (name, tp, ep)
            assert layout.refusal(g, None, tp, ep) is None  # unquantized


def test_a_dense_mlp_narrower_than_whole_blocks_is_refused_even_at_tp1():
    """DeepSeek-V2-Lite's first layer is a 10944-wide dense MLP: 85.5 blocks or groups of 128.
    vLLM checks a fused gate_up's parts but the last unsplit (validate_fp8_block_shape), and
    every group-quantized input (verify_group_size_divides_partition), at any TP."""
    config = _config("deepseek-v2-lite")
    said = layout.recipe_refusal(geometry.of(config), recipe.load("fp8-block"), tp=1)
    assert said == (
        "mlp.gate_up_proj's 10944-wide gate_proj output is not a whole number of fp8-block's "
        "128-wide blocks, even unsplit"
    )
    said = layout.recipe_refusal(geometry.of(config), recipe.load("gptq"), tp=1)
    assert said is not None and said.startswith("mlp.down_proj's 10944-wide input")


def test_expert_parallel_does_not_help_when_a_shared_expert_straddles():
    """Qwen1.5-MoE's shared expert (5632 wide) stays tensor-parallel under expert parallel:
    704 per rank at TP 8, not whole groups of 128, so no flag is offered."""
    config = _config("qwen1.5-moe-a2.7b")
    said = layout.recipe_refusal(geometry.of(config), recipe.load("gptq"), tp=8)
    assert said is not None and "experts" in said and "expert parallel" not in said
    with_ep = layout.recipe_refusal(
        geometry.of(config), recipe.load("gptq"), tp=8, expert_parallel=True
    )
    assert with_ep is not None and "mlp.shared_expert.down_proj" in with_ep and "704" in with_ep
    assert (
        layout.recipe_refusal(geometry.of(config), recipe.load("gptq"), tp=4, expert_parallel=True)
        is None
    )


def test_fp4_groups_that_straddle_are_refused_though_vllm_loads_them_unchecked():
    config = _config("deepseek-v2-lite")
    said = layout.recipe_refusal(geometry.of(config), recipe.load("mxfp4"), tp=4)
    assert (
        said is not None and "2736" in said and "groups of 32" in said and "without a check" in said
    )
    assert (
        layout.recipe_refusal(geometry.of(config), recipe.load("mxfp4"), tp=2) is None
    )  # 5472 = 171 × 32
    assert (
        layout.recipe_refusal(geometry.of(config), recipe.load("nvfp4"), tp=4) is None
    )  # 2736 = 171 × 16


def test_asymmetric_groups_check_the_experts_like_symmetric_ones():
    config = _config("qwen3-30b-a3b")
    assert layout.recipe_refusal(geometry.of(config), recipe.load("awq"), tp=4) is not None
    assert (
        layout.recipe_refusal(geometry.of(config), recipe.load("awq"), tp=4, expert_parallel=True)
        is None
    )


def test_a_split_vllm_cannot_make_is_named():
    g = geometry.of(_config("qwen3-30b-a3b"))
    assert "TP 3 does not divide self_attn.qkv_proj's 32 heads" in layout.refusal(g, None, 3)


def test_qwen3_moe_linears_as_vllm_splits_them():
    lin = _by_name(_config("qwen3-30b-a3b"))
    assert set(lin) == {"self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate", "mlp.experts"}
    qkv = lin["self_attn.qkv_proj"]
    assert qkv.style is Style.QKV and qkv.outputs == (4096, 512, 512)
    assert qkv.shard(8).outputs == (512, 128, 128)  # 4 KV heads: one per rank, replicated
    experts = lin["mlp.experts"]
    assert experts.shard(8).intermediate == 96 and experts.shard(8).experts == 128
    whole = experts.shard(8, expert_parallel=True)
    assert whole.intermediate == 768 and whole.experts == 16 and not whole.input_split
    assert experts.shard(1, expert_parallel=True).experts == 128  # EP needs more than one rank
    assert not lin["mlp.gate"].quantized and lin["mlp.gate"].style is Style.REPLICATED


def test_latent_attention_as_deepseek_v2_py_builds_it():
    lite, v3 = _by_name(_config("deepseek-v2-lite")), _by_name(_config("deepseek-v3"))
    assert lite["self_attn.q_proj"].style is Style.COLUMN
    assert lite["self_attn.kv_a_proj_with_mqa"].style is Style.REPLICATED
    fused = v3["self_attn.fused_qkv_a_proj"]
    assert fused.style is Style.MERGED_REPLICATED and fused.outputs == (1536, 576)
    assert fused.shard(8).outputs == (1536, 576)  # disable_tp: whole on every rank
    assert v3["self_attn.o_proj"].shard(8).in_features == 128 * 128 // 8
    assert v3["mlp.shared_experts.gate_up_proj"].outputs == (2048, 2048)
    kinds = {k.name: k.layers for k in geometry.of(_config("deepseek-v3")).linears.kinds}
    assert kinds == {"dense": 3, "moe": 58}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_bundled_config_reads_and_splits_at_the_tps_vllm_accepts(path):
    config = json.loads(path.read_text())
    g = geometry.of(config)
    assert g is geometry.of(config) and g.linears.kinds  # read once per config
    assert sum(k.layers for k in g.linears.kinds) == g.layers
    for tp in parallel.tensor_parallel_sizes(g, 8):
        for one in g.linears.distinct:
            assert one.indivisible(tp) is None, (one.name, tp)
            shard = one.shard(tp)
            if one.style is Style.EXPERTS:  # split on the intermediate width (w13 out, w2 in)
                assert shard.intermediate * tp == one.outputs[0]
            else:
                assert shard.in_features * (tp if shard.input_split else 1) == one.in_features


def test_the_rule_is_fast_enough_for_make_plan():
    import time

    g, block = geometry.of(_config("qwen3-30b-a3b")), PRESETS["FP8_BLOCK"]
    start = time.perf_counter()
    for _ in range(100):
        for tp in (1, 2, 4, 8):
            layout.refusal(g, block, tp)
    assert (time.perf_counter() - start) / 400 < 0.005  # seconds per call, generous
