"""Known answers for the roofline bound, from the arithmetic in pipeline/perf/bound.py's
docstring and the GPUs' datasheet figures."""

import dataclasses

import pytest

from pipeline.config import recipe
from pipeline.models import aliases, architecture
from pipeline.perf import bound
from pipeline.planning import geometry, gpus

H100 = gpus.SPECS["H100-80GB"]


def config(name: str) -> dict:
    return aliases.load_config(aliases.resolve(name))


def test_llama3_70b_bf16_on_four_h100_batch_1_reads_the_weights_once_a_token():
    c = config("llama3-70b")
    fp = bound.footprint(geometry.of(c))
    step = bound.decode(geometry.of(c), fp, H100, batch=1, context=1, kv_dtype="auto", tp=4)
    embedding = c["vocab_size"] * c["hidden_size"]
    weights = (architecture.total_params(c) - embedding) * 2  # every byte but the lookup table
    assert 139e9 < weights < 141e9
    # KV: 80 layers × K and V × 2 of the 8 KV heads on each rank × 128 × 2 bytes, one token
    kv = 80 * 2 * 2 * 128 * 2
    assert step.bytes == pytest.approx(weights / 4 + kv)
    # two ring all-reduces a layer of one token's 8192 16-bit values: 3/4 of them cross
    link = 2 * 80 * (2 * 3 / 4 * 8192 * 2) / 450e9
    assert step.seconds == pytest.approx((weights / 4 + kv) / 3.35e12 + link)
    assert 10.3e-3 < step.seconds < 10.6e-3  # the 141 GB / (4 × 3.35 TB/s) ≈ 10.5 ms
    assert step.bound_by == "memory"


def test_a_long_prompt_is_compute_bound_at_the_16_bit_peak():
    c = config("llama3-8b")
    fp = bound.footprint(geometry.of(c))
    step = bound.prefill(geometry.of(c), fp, H100, prompts=1, length=4096, kv_dtype="auto", tp=1)
    linear = sum(lin.params for lin in architecture.linears(c))
    attention = 4 * 32 * 128 * 32 * 4096 * 4096 // 2  # QK and AV, causal half
    assert step.flops == pytest.approx(2 * linear * 4096 + attention)
    assert step.seconds == pytest.approx(step.flops / 989.4e12)
    assert (step.bound_by, step.compute) == ("compute", "bf16")


def test_fp8_activations_run_on_fp8_tensor_cores_where_the_gpu_has_them():
    c = config("llama3-8b")
    fp8, gptq = (
        bound.footprint(geometry.of(c), recipe.load("fp8")),
        bound.footprint(geometry.of(c), recipe.load("gptq")),
    )
    assert (fp8.compute, gptq.compute) == ("fp8", "bf16")  # weight-only: 16-bit compute
    on_h100 = bound.prefill(geometry.of(c), fp8, H100, 1, 4096, "auto", 1)
    on_a100 = bound.prefill(geometry.of(c), fp8, gpus.SPECS["A100-80GB"], 1, 4096, "auto", 1)
    assert (on_h100.compute, on_a100.compute) == ("fp8", "bf16")  # no FP8 tensor cores
    assert on_h100.seconds == pytest.approx(on_h100.flops / 1978.9e12)
    assert bound.compute_format(recipe.load("int8")) == "int8"
    assert bound.compute_format(recipe.load("nvfp4")) == "fp4"
    assert bound.compute_format(recipe.load("nvfp4a16")) == "bf16"


def test_quantized_weights_are_read_at_their_bits():
    c = config("llama3-8b")
    original, fp8 = (
        bound.footprint(geometry.of(c)),
        bound.footprint(geometry.of(c), recipe.load("fp8")),
    )
    lm_head = c["vocab_size"] * c["hidden_size"] * 2  # the LM head stays 16-bit
    decoder = original.dense_bytes - lm_head
    # 8-bit weights plus one bf16 scale per output channel: a little over half
    assert 0.50 < (fp8.dense_bytes - lm_head) / decoder < 0.502


def test_moe_decode_reads_only_the_experts_its_tokens_pick():
    c = config("mixtral-8x7b")
    fp = bound.footprint(geometry.of(c))
    assert (fp.experts, fp.active_experts) == (8, 2)
    assert bound.touched(8, 2, 1) == 0.25
    assert bound.touched(8, 2, 64) == pytest.approx(1.0, abs=1e-7)
    one = bound.decode(geometry.of(c), fp, H100, 1, 1, "auto", 1)
    many = bound.decode(geometry.of(c), fp, H100, 64, 1, "auto", 1)
    kv = 32 * 2 * 8 * 128 * 2  # one cached token per sequence: 32 layers × K, V × 8 heads
    assert one.bytes == pytest.approx(fp.dense_bytes + fp.expert_bytes / 4 + kv)
    assert many.bytes == pytest.approx(fp.dense_bytes + fp.expert_bytes + 64 * kv, rel=1e-6)
    # FLOPs follow the 2 active experts of 8 at any batch
    per_token = 2 * (fp.dense_params + fp.expert_params / 4)
    assert one.flops == pytest.approx(per_token + fp.attention_flops)


def test_decode_turns_compute_bound_near_the_ridge_point():
    """Short context: FLOPs per byte of a batch-B step ≈ B (2 FLOPs per 2-byte weight), so
    decode turns compute-bound near peak / bandwidth = 989.4 / 3.35 ≈ 295 sequences."""
    c = config("llama3-8b")
    found = bound.compute_bound_batch(
        geometry.of(c), bound.footprint(geometry.of(c)), H100, 1, "auto", 1, most=4096
    )
    assert 280 <= found <= 300
    # at 4k tokens of context the KV read grows with the batch: memory-bound throughout
    assert (
        bound.compute_bound_batch(
            geometry.of(c), bound.footprint(geometry.of(c)), H100, 4000, "auto", 1, 4096
        )
        is None
    )


def test_pipeline_stages_add_the_hidden_states_crossing_nodes_through_the_nic():
    """Llama-3.1-405B bf16 on TP 8 × PP 2 H100s: the TP-8 step, plus one token's 16,384 16-bit
    hidden values crossing one node boundary at the NIC's 50 GB/s (DGX H100: 400 Gb/s a GPU)."""
    c = config("llama3-405b")
    fp = bound.footprint(geometry.of(c))
    one_node = bound.decode(geometry.of(c), fp, H100, batch=1, context=1, kv_dtype="auto", tp=8)
    two = bound.decode(geometry.of(c), fp, H100, batch=1, context=1, kv_dtype="auto", tp=8, pp=2)
    assert H100.nic_bytes_s == 50e9 and "ConnectX-7" in H100.source
    assert two.seconds - one_node.seconds == pytest.approx(16_384 * 2 / 50e9)
    assert two.link_seconds > one_node.link_seconds and two.bytes == one_node.bytes
    unknown = dataclasses.replace(H100, nic_bytes_s=0.0)  # left out: still a lower bound
    same = bound.decode(
        geometry.of(c), fp, unknown, batch=1, context=1, kv_dtype="auto", tp=8, pp=2
    )
    assert same.seconds == one_node.seconds
