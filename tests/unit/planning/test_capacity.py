"""The capacity planner's arithmetic, offline, from bundled configs; and against what was built."""

import pytest

from pipeline.config import recipe
from pipeline.core.errors import UserError
from pipeline.models import aliases as models
from pipeline.planning import capacity as planner
from pipeline.planning import geometry, kv_cache
from pipeline.planning.gpus import named
from tests.conftest import cli

GIB = 2**30


def _config(alias: str) -> dict:
    return models.load_config(models.resolve(alias))


def test_llama3_70b_kv_for_100_users_at_4000_tokens():
    config = _config("llama3-70b")  # 80 layers, 8 KV heads (GQA), head_dim 128
    assert kv_cache.bytes_per_token(geometry.of(config), "auto") == 80 * 8 * 128 * 2 * 2 == 327_680
    assert kv_cache.bytes_per_token(geometry.of(config), "fp8") == 163_840
    rows = planner.plan(geometry.of(config), [], ["auto", "fp8"], 100, 4000, named("H100-80GB"))
    sixteen, fp8 = rows
    assert sixteen.kv_bytes_needed == 327_680 * 4000 * 100  # 122.1 GiB
    assert fp8.kv_bytes_needed * 2 == sixteen.kv_bytes_needed
    assert sixteen.weights_bytes / GIB == pytest.approx(131.4, abs=0.1)
    # 4 × (79.6 × 0.9 − 2) − 131.4 = 117.6 GiB... not enough at TP 2; TP 3 does not divide 64
    assert sixteen.gpus == 4 and fp8.gpus == 4


def test_quantized_weights_need_fewer_gpus_and_fit_more_users():
    config = _config("llama3-70b")
    gptq = recipe.load("gptq")
    rows = planner.plan(geometry.of(config), [gptq], ["fp8"], 100, 4000, named("H100-80GB"))
    original, quantized = rows
    assert quantized.gpus == 2 < original.gpus
    room = quantized.kv_room_bytes
    assert quantized.max_users == room // (quantized.kv_bytes_per_token * 4000) >= 100


def test_tensor_parallel_size_divides_the_attention_heads():
    config = {**_config("llama3-8b"), "num_attention_heads": 24, "num_key_value_heads": 8}
    gpu = named("L40S-48GB")
    row = planner.plan(geometry.of(config), [], ["auto"], 130, 8000, gpu)[0]
    # 130 × 8000 tokens × 170 KiB = 169 GiB: five L40S would hold it, but 5 does not divide 24
    # heads, and 6 does not divide 8 KV heads (vLLM's rule): 8
    per_gpu = gpu.memory_bytes * 0.9 - 2 * GIB
    assert 5 * per_gpu - row.weights_bytes >= row.kv_bytes_needed > 4 * per_gpu - row.weights_bytes
    assert (row.gpus, row.tp, row.pp) == (8, 8, 1)


def test_gpu_names_and_sizes():
    assert named("h200-141gb").memory_bytes == 143_771 * 2**20
    assert named("24GiB").memory_bytes == 24 * GIB
    assert named("48GB").memory_bytes == 48 * 10**9
    with pytest.raises(UserError, match="unknown GPU 'B300'"):
        named("B300")
    with pytest.raises(UserError, match="unknown KV-cache dtype 'int4'"):
        kv_cache.bytes_per_token(geometry.of(_config("llama3-8b")), "int4")


def test_plan_command_prints_the_table_offline(tmp_path):
    result = cli(
        "plan", "--model", "llama3-70b", "--users", "100", "--context", "4000", runs=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "100 users × 4,000 tokens" in result.stdout
    assert "122.1" in result.stdout and "61.0" in result.stdout  # KV GiB, 16-bit and FP8
    assert not any(tmp_path.rglob("*"))


def test_beyond_one_node_tp_fills_the_node_and_pipeline_stages_add_nodes():
    """Llama-3.1-405B, 100 users × 4,000 tokens on H100s: TP 32 would replicate its 8 KV heads
    4×; vLLM's guidance is TP = GPUs per node, PP = nodes: 756 GiB + 192 GiB of KV on 16."""
    config = _config("llama3-405b")
    gpu = named("H100-80GB")
    original, original_fp8_kv = planner.plan(
        geometry.of(config), [], ["auto", "fp8"], 100, 4000, gpu
    )
    assert (original.tp, original.pp, original.gpus) == (8, 2, 16)
    assert original.executor == "ray"  # vLLM reaches the second node's stage only through Ray
    assert "--pipeline-parallel-size 2 --distributed-executor-backend ray" in planner.render(
        [original], 100, 4000, gpu
    )
    assert original.kv_bytes_needed / GIB == pytest.approx(192.3, abs=0.1)
    fp8 = recipe.load("fp8")
    _, with_fp8_kv = planner.plan(geometry.of(config), [fp8], ["auto", "fp8"], 100, 4000, gpu)[2:]
    assert (with_fp8_kv.tp, with_fp8_kv.pp, with_fp8_kv.executor) == (8, 1, "mp")  # one node


def test_an_original_that_ships_in_fp8_is_counted_as_shipped():
    """DeepSeek-V3 ships FP8 in 128 × 128 blocks: ~627 GiB, not 1,250 GiB of bf16: one node
    of 8 H200s holds it and 100 users' 26 GiB of (replicated) latent KV."""
    config = _config("deepseek-v3")
    gpu = named("H200-141GB")
    (row,) = planner.plan(geometry.of(config), [], ["auto"], 100, 4000, gpu)
    assert 600 < row.weights_bytes / GIB < 650 and (row.tp, row.pp) == (8, 1)
