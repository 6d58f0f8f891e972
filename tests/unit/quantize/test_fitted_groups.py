"""A preset whose groups do not divide a model's Linears runs in smaller groups (SmolLM2's 576)."""

import pytest

from pipeline.config import recipe
from pipeline.config.schemes import scheme_from_args
from pipeline.core.errors import UserError
from pipeline.models import aliases
from pipeline.planning import geometry
from pipeline.quantize import plan


def test_w4a16_on_576_wide_inputs_takes_groups_of_64():
    g = geometry.of_model(aliases.resolve("smollm2-135m"))
    for name in ("gptq", "w4a16-rtn", "awq"):
        rf = recipe.load(name)
        fitted = plan.fitted(rf, g, "smollm2-135m")
        scheme = fitted.scheme()
        assert scheme.group_size == 64 and scheme.weight_bits == 4
        assert scheme.name == f"{rf.scheme().name}_G64"
        assert fitted.name == name and "groups of 64" in fitted.text
        assert [n for n, _ in fitted.modifiers()] == [n for n, _ in rf.modifiers()]


def test_a_recipe_that_fits_is_returned_as_it_is():
    g = geometry.of_model(aliases.resolve("llama3-8b"))
    rf = recipe.load("gptq")
    assert plan.fitted(rf, g, "llama3-8b") is rf
    small = geometry.of_model(aliases.resolve("smollm2-135m"))
    fp8 = recipe.load("fp8")
    assert plan.fitted(fp8, small, "smollm2-135m") is fp8  # per channel: no groups


def test_no_smaller_group_that_divides_is_the_one_line_refusal(monkeypatch):
    g = geometry.of_model(aliases.resolve("smollm2-135m"))
    monkeypatch.setattr(plan, "SMALLER_GROUPS", (100,))
    with pytest.raises(UserError, match="group size 128 does not divide smollm2-135m"):
        plan.fitted(recipe.load("gptq"), g, "smollm2-135m")


def test_a_preset_in_other_groups_reads_back_as_that_preset():
    args = {"config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
        "group_size": 32}}}}  # fmt: skip
    assert scheme_from_args(args).name == "W4A16_ASYM_G32"


def test_blocks_that_do_not_divide_are_refused_in_one_line():
    """compressed-tensors only warns, then the save fails ("non contiguous tensor"): SmolLM2's
    576-wide layers against FP8_BLOCK's 128×128."""
    g = geometry.of_model(aliases.resolve("smollm2-135m"))
    with pytest.raises(UserError, match=r"FP8_BLOCK's 128×128 blocks do not divide smollm2-135m"):
        plan.fitted(recipe.load("fp8-block"), g, "smollm2-135m")
    fits = geometry.of_model(aliases.resolve("llama3-8b"))
    assert plan.fitted(recipe.load("fp8-block"), fits, "llama3-8b").scheme().block == (128, 128)
