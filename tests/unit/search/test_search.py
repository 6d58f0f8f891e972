"""Mixed-precision search: groups, the knapsack, the written recipe and its planned size."""

import itertools
import random

import pytest

from pipeline.config import recipe
from pipeline.planning import geometry, weights
from pipeline.search import groups, select, writer
from pipeline.search.sensitivity import CANDIDATES, group_bits


def test_groups_follow_vllms_fused_layers():
    assert groups.key("model.layers.3.self_attn.k_proj") == "model.layers.3.self_attn.qkv_proj"
    assert groups.key("model.layers.3.mlp.up_proj") == "model.layers.3.mlp.gate_up_proj"
    assert groups.key("model.layers.0.mlp.down_proj") == "model.layers.0.mlp.down_proj"
    assert groups.key("lm_head") is None and groups.key("model.embed_tokens") is None


def test_the_knapsack_finds_the_least_kl_within_the_budget():
    rng = random.Random(1)
    for _ in range(20):
        n = rng.randint(2, 6)
        bits = [sorted(rng.uniform(1, 10) for _ in range(3)) for _ in range(n)]
        costs = [sorted((rng.uniform(0, 1) for _ in range(3)), reverse=True) for _ in range(n)]
        budget = rng.uniform(sum(b[0] for b in bits), sum(b[2] for b in bits))
        chosen = select.cheapest(costs, bits, budget)
        assert sum(bits[g][c] for g, c in enumerate(chosen)) <= budget
        best = min(
            sum(costs[g][c] for g, c in enumerate(pick))
            for pick in itertools.product(range(3), repeat=n)
            if sum(bits[g][c] for g, c in enumerate(pick)) <= budget * (1 - 1e-3)
        )  # the bits round up by at most 1/4000 of the budget
        assert sum(costs[g][c] for g, c in enumerate(chosen)) <= best + 1e-12
    with pytest.raises(ValueError):
        select.cheapest([[0.1]], [[5.0]], 4.0)


def test_the_random_control_stays_within_the_budget_and_is_seeded():
    bits = [[4.0, 8.0, 16.0]] * 10
    a, b = select.random_fill(bits, 60.0, 0), select.random_fill(bits, 60.0, 0)
    assert a == b and sum(bits[g][c] for g, c in enumerate(a)) <= 60.0
    assert sum(bits[g][c] for g, c in enumerate(a)) > 60.0 - 8  # fills what it can
    assert select.random_fill(bits, 60.0, 1) != a


def test_group_bits_count_scales():
    g = groups.Group("g", ("a",), ((256, 768),))
    assert group_bits(g, CANDIDATES["W4A16"]) == 256 * 768 * 4 + 256 * 6 * 16
    assert group_bits(g, None) == 256 * 768 * 16
    odd = groups.Group("o", ("a",), ((256, 100),))
    assert group_bits(odd, CANDIDATES["W4A16"]) == float("inf")


def test_uniform_recipes_bits_per_weight_include_scales():
    from pipeline.models.tiny.spec import CONFIG

    bits = {
        n: weights.bits_per_weight(recipe.load(n), geometry.of(CONFIG))
        for n in ("gptq", "w8a16", "nvfp4")
    }
    assert bits == {"gptq": 4.125, "w8a16": 8.125, "nvfp4": pytest.approx(4.5, abs=1e-3)}


def test_a_written_recipe_loads_and_is_planned_per_group(tmp_path):
    """tiny-llama: layer 0 at W8A16, layer 1 16-bit, layers 2-3 at W4A16."""
    from pipeline.models.tiny.spec import CONFIG

    found = []
    for layer in range(4):
        for name, shapes in (
            ("self_attn.qkv_proj", [("q", 256, 256), ("k", 128, 256), ("v", 128, 256)]),
            ("self_attn.o_proj", [("o", 256, 256)]),
            ("mlp.gate_up_proj", [("gate", 768, 256), ("up", 768, 256)]),
            ("mlp.down_proj", [("down", 256, 768)]),
        ):
            prefix = f"model.layers.{layer}.{name.split('.')[0]}"
            members = tuple(f"{prefix}.{m}_proj" for m, _, _ in shapes)
            found.append(
                groups.Group(
                    f"model.layers.{layer}.{name}", members, tuple((o, i) for _, o, i in shapes)
                )
            )
    chosen = [["W8A16", "BF16", "W4A16", "W4A16"][int(g.name.split(".")[2])] for g in found]
    path = tmp_path / "mixed.yaml"
    writer.write(path, writer.recipe_text("mixed", "test", found, chosen))
    rf = recipe.load(str(path))
    assert [s.name for s, _ in rf.schemes()] == ["W4A16", "W8A16"]
    expected = sum(group_bits(g, CANDIDATES[c]) for g, c in zip(found, chosen, strict=True)) / 8
    rest = 2 * 4096 * 256 + 256 * 9  # embeddings, LM head, norms: 16-bit
    assert weights.artifact_bytes(rf, geometry.of(CONFIG)) == int(expected + rest * 2)
    params = sum(g.params for g in found)
    assert weights.bits_per_weight(rf, geometry.of(CONFIG)) == pytest.approx(expected * 8 / params)
