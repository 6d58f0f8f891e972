"""vLLM 0.32's tensor-parallel rule (vllm/config/model.py, vllm/model_executor/layers/linear.py),
and every plan over the bundled configs and the zoo keeping to it."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.models import aliases, architecture
from pipeline.models.zoo import FAMILIES, shrunk_config
from pipeline.planning import capacity, deployment, geometry, gpus, parallel


def _config(alias: str) -> dict:
    return aliases.load_config(aliases.resolve(alias))


def test_heads_and_kv_heads_decide_the_sizes():
    assert parallel.tensor_parallel_sizes(geometry.of(_config("llama3-70b")), 8) == [1, 2, 4, 8]
    qwen = _config("qwen2.5-7b")  # 28 heads, 4 KV heads
    assert "not a multiple of its 4 KV heads" in parallel.tp_refusal(7, geometry.of(qwen))
    assert parallel.tensor_parallel_sizes(geometry.of(qwen), 8) == [1, 2, 4]
    odd = {**_config("llama3-8b"), "num_attention_heads": 24, "num_key_value_heads": 8}
    assert "8 KV heads do not divide by 6" in parallel.tp_refusal(6, geometry.of(odd))
    mla = _config("deepseek-v2-lite")  # latent attention: one latent per rank, heads only
    assert geometry.of(mla).kv_heads == 1
    assert parallel.tensor_parallel_sizes(geometry.of(mla), 8) == [1, 2, 4, 8]


CONFIGS = [_config(a) for a in aliases.ALIASES] + [shrunk_config(a) for a in FAMILIES]


@settings(max_examples=200, deadline=None)
@given(
    config=st.sampled_from(CONFIGS),
    users=st.integers(1, 2000),
    context=st.integers(128, 131_072),
    gpu=st.sampled_from(sorted(gpus.SPECS)),
    kv=st.sampled_from(["auto", "fp8"]),
    per_node=st.sampled_from([1, 2, 4, 8]),
)
def test_no_plan_proposes_a_size_vllm_refuses_or_wider_than_a_node(
    config, users, context, gpu, kv, per_node
):
    load = deployment.Load(architecture.total_params(config) * 2, kv, users, context)
    found = deployment.fewest(geometry.of(config), load, gpus.named(gpu, per_node))
    assume(found is not None)  # fits nowhere (test_deployment.py covers the refusal)
    tp, pp = found.tensor_parallel_size, found.pipeline_parallel_size
    assert parallel.tp_refusal(tp, geometry.of(config)) is None and tp <= per_node
    assert found.gpus == tp * pp and pp <= gpus.MAX_NODES and found.max_users >= users
    assert found.executor == ("ray" if pp > 1 else "mp")
    if pp > 1:  # across nodes only when one node's largest TP cannot hold it
        assert tp == parallel.tensor_parallel_sizes(geometry.of(config), per_node)[-1]


@pytest.mark.parametrize("alias", ["llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b"])
def test_one_node_models_stay_on_one_node(alias):
    config = _config(alias)
    rows = capacity.plan(
        geometry.of(config), [], ["auto", "fp8"], 100, 4000, gpus.named("H100-80GB")
    )
    assert [(r.recipe, r.kv_dtype) for r in rows] == [("original", "auto"), ("original", "fp8")]
    for row in rows:
        assert row.pp == 1 and row.tp in parallel.tensor_parallel_sizes(geometry.of(config), 8)
