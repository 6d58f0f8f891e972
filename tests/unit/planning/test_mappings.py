"""`quantize --nproc N` maps each tensor compressed-tensors shares into every rank: the plan
counts them against vm.max_map_count (planning/shm.py; the count per tensor measured on CPU
ranks by tests/e2e/quantize/test_distributed.py)."""

from pipeline.models import aliases
from pipeline.planning import geometry, shm


def test_a_mixture_of_experts_can_pass_the_kernels_default_cap_and_a_dense_70b_cannot(tmp_path):
    default = tmp_path / "max_map_count"
    default.write_text("65530\n")
    v3 = geometry.of_model(aliases.resolve("deepseek-v3"))
    said = shm.mappings_refusal(shm.shared_tensors(v3), "8 processes", default)
    assert said == (
        "8 processes maps 135,455 shared tensors into every process, 137,067 mappings with its "
        "own, over this host's vm.max_map_count of 65,530: raise it on the host (sysctl -w "
        "vm.max_map_count=262144; a container has the host's), or run one process"
    )
    dense = geometry.of_model(aliases.resolve("llama3-70b"))
    assert shm.mappings_refusal(shm.shared_tensors(dense), "8 processes", default) is None
    assert shm.mappings_refusal(10**6, "x", tmp_path / "absent") is None  # no such limit: no check


def test_the_count_is_what_a_gptq_rank_shares(tmp_path):
    """The zoo's 2-layer Llama: 7 Linears a layer + lm_head, a scale and zero point for each of
    the 14 quantized ones, 4 norms, the final norm, the embeddings and 2 rotary buffers."""
    from pipeline.models.zoo import shrunk_config

    g = geometry.of(shrunk_config("llama3.1-8b"))
    assert g.layers == 2 and shm.shared_tensors(g) == 15 + 2 * 14 + 4 + 2 + 2
