"""The capacity planner's figures against the tiny model and the artifacts built from it."""

import json

import pytest

from pipeline.config import recipe
from pipeline.planning import capacity as planner
from pipeline.planning import geometry, kv_cache
from pipeline.planning.gpus import named

GIB = 2**30


def test_tiny_llama_kv_tokens_for_a_1gib_pool(tiny_model):
    """What vLLM's CPU engine reported for a 1 GiB pool (tests/e2e/serve checks it live)."""
    config = json.loads((tiny_model / "config.json").read_text())
    # full attention: the pool's tokens (512-token requests, vLLM's 128-token CPU blocks)
    assert kv_cache.kv_tokens(GIB, geometry.of(config), "auto", 512, 128, 2048) == 524_288
    assert kv_cache.kv_tokens(GIB, geometry.of(config), "fp8", 512, 128, 2048) == 1_048_576


@pytest.mark.slow
@pytest.mark.parametrize("name", recipe.artifact_recipes())
def test_predicted_weights_match_the_artifact_within_2_percent(quantized, tiny_model, name):
    from pipeline.quantize import artifact

    config = json.loads((tiny_model / "config.json").read_text())
    row = planner.plan(geometry.of(config), [recipe.load(name)], ["auto"], 1, 1, named("1GiB"))[
        1
    ]  # 1: it
    actual = sum(i.nbytes for i in artifact.tensors(quantized(name) / "artifact").values())
    assert row.weights_bytes == pytest.approx(actual, rel=0.02)
