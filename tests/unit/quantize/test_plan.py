"""What a recipe needs and touches, decided from the config alone."""

import pytest

from pipeline.config import recipe
from pipeline.config.schemes import scheme_from_args
from pipeline.quantize import plan


def test_which_recipes_need_calibration_data():
    needs = {name: plan.needs_calibration(recipe.load(name)) for name in recipe.shipped()}
    assert needs == {
        "awq": True, "fp8": False, "fp8-kv": True, "gptq": True, "int8": True, "w4a16-rtn": False,
        "vllm-fp8": False,
    }  # fmt: skip


@pytest.mark.parametrize(
    "name, patterns, ignored",
    [
        ("lm_head", ["lm_head"], True),
        ("mlp.gate", ["re:.*mlp.gate$"], True),
        ("mlp.gate_proj", ["re:.*mlp.gate$"], False),
        ("self_attn.q_proj", ["q_proj"], True),
        ("self_attn.q_proj", ["k_proj"], False),
    ],
)
def test_ignore_patterns(name, patterns, ignored):
    assert plan._ignored(name, patterns) is ignored


def test_schemes_from_presets_and_config_groups():
    assert scheme_from_args({"scheme": "w4a16"}).group_size == 128
    assert scheme_from_args({"scheme": {"FP8_DYNAMIC": ["Linear"]}}).weight_type == "float"
    custom = scheme_from_args(
        {"config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 64, "symmetric": False}}}}
    )
    assert (custom.name, custom.weight_bits, custom.group_size, custom.symmetric) == (
        "custom", 4, 64, False,
    )  # fmt: skip
    assert custom.activation_bits is None and scheme_from_args({}) is None
