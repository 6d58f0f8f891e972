"""Engine sizes per side from the deployment planner: known answers for Llama-3-70B on H100s."""

import pytest

from pipeline.config import recipe
from pipeline.core.errors import NotOnThisHost
from pipeline.engines.vllm import sizing
from pipeline.models import aliases, architecture
from pipeline.planning import geometry
from pipeline.planning.deployment import Load
from pipeline.planning.gpus import this_node
from pipeline.planning.weights import artifact_bytes

H100 = "NVIDIA H100 80GB HBM3, 81559 MiB"


EVAL = sizing.llm_budget(4)  # the eval backend's vllm.LLM: max_num_seqs 4


def _weights(name: str, config: dict) -> int:
    if name == "original":
        return architecture.total_params(config) * 2
    return artifact_bytes(recipe.load(name), geometry.of(config))


@pytest.mark.parametrize(
    "gpus, original_tp, fp8_tp, w4a16_tp",
    [(1, None, 1, 1), (2, 2, 1, 1), (4, 2, 1, 1), (8, 2, 1, 1)],
)
def test_llama3_70b_eval_engines_per_gpu_count(gpus, original_tp, fp8_tp, w4a16_tp):
    """141 GB of bf16 weights need two 80 GB GPUs (0.9 × 79.19 GiB = 71.3 GiB per GPU), the
    72.7 GB FP8 artifact and the ~40 GB W4A16 one fit one: eval's `vllm.LLM` engine profiles
    4 × 513 = 2,052 tokens (max_num_seqs 4), ~1.0 GiB of engine memory beside 67.7 GiB of FP8
    weights, and its windows' KV (4 × 513 tokens, 320 KiB a token) fits the rest."""
    config = aliases.load_config(aliases.resolve("llama3-70b"))
    host = [H100] * gpus
    for name, tp in (("original", original_tp), ("fp8", fp8_tp), ("gptq", w4a16_tp)):
        weights = _weights(name, config)
        if tp is None:
            with pytest.raises(NotOnThisHost, match=r"need 2 GPUs of 80 GiB .* this host has 1"):
                sizing.engine(geometry.of(config), Load(weights, "auto", 4, 513), host, name, EVAL)
            continue
        engine = sizing.engine(geometry.of(config), Load(weights, "auto", 4, 513), host, name, EVAL)
        assert engine.tensor_parallel_size == tp, name
        kwargs = engine.vllm_kwargs()
        assert kwargs == {
            "tensor_parallel_size": tp,
            "gpu_memory_utilization": 0.9,
            "max_num_seqs": 4,
            "enforce_eager": False,  # CUDA graphs on a GPU
        }
        assert f"tensor parallel {tp}" in engine.reason


def test_a_longer_batch_needs_more_gpus_for_its_kv_cache():
    config = aliases.load_config(aliases.resolve("llama3-70b"))
    fp8 = _weights("fp8", config)
    # 64 × 4,096 tokens × 320 KiB = 80 GiB of KV: one GPU cannot hold it beside 67.7 GiB
    engine = sizing.engine(geometry.of(config), Load(fp8, "auto", 64, 4096), [H100] * 8, "fp8")
    assert engine.tensor_parallel_size == 4 and engine.max_num_seqs == 64


def test_a_cpu_host_runs_one_eager_engine():
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    engine = sizing.engine(geometry.of(config), Load(16 * 2**30, "auto", 4, 513), [], "original")
    assert engine.vllm_kwargs()["tensor_parallel_size"] == 1 and engine.enforce_eager


def test_this_node_is_its_smallest_gpu_read_from_nvidia_smi_lines():
    node = this_node([H100, "NVIDIA A100-SXM4-40GB, 40960 MiB"])
    assert (node.name, node.memory_bytes, node.per_node, node.nodes) == (
        "A100-40GB",
        40960 * 2**20,
        2,
        1,
    )
    assert this_node([]) is None
    unknown = this_node(["Some Future GPU, 200000 MiB"])
    assert unknown.memory_bytes == 200000 * 2**20 and unknown.scheduled_tokens == 16_384
