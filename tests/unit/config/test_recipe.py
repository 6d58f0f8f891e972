"""Recipes: loading, validation with file:line and the valid keys, the schemes they name."""

import pytest

from pipeline.config import recipe
from pipeline.core.errors import UserError
from tests.conftest import cli


def test_the_required_recipes_ship_with_their_schemes():
    schemes = {name: recipe.load(name).scheme().name for name in recipe.shipped()}
    assert schemes == {
        "fp8": "FP8_DYNAMIC",
        "fp8-kv": "FP8_DYNAMIC",
        "awq": "W4A16_ASYM",
        "gptq": "W4A16",
        "int8": "W8A8",
        "w4a16-rtn": "W4A16",
        "vllm-fp8": "FP8_DYNAMIC",  # online: what vLLM holds in memory
        "fp8-block": "FP8_BLOCK",
        "w8a16": "W8A16",
        "nvfp4": "NVFP4",
        "nvfp4a16": "NVFP4A16",
        "mxfp4": "MXFP4",
        "autoround": "W4A16",
    }
    mods = {name: [m for m, _ in recipe.load(name).modifiers()] for name in schemes}
    assert mods["vllm-fp8"] == [] and recipe.load("vllm-fp8").online == "fp8"
    assert mods["awq"] == ["AWQModifier", "QuantizationModifier"]
    assert mods["int8"] == ["SmoothQuantModifier", "GPTQModifier"]
    kv = {name for name in schemes if recipe.load(name).kv_cache_scheme()}
    assert {n for n in schemes if recipe.load(n).engine_args()} == {"vllm-fp8"}
    assert kv == {"fp8-kv"} and recipe.load("fp8-kv").spec.serve.kv_cache_dtype == "fp8"
    assert mods["w4a16-rtn"] == ["QuantizationModifier"]


def _write(tmp_path, text):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return str(path)


GOOD = """description: test
quantization:
  quant_stage:
    quant_modifiers:
      GPTQModifier: {targets: [Linear], scheme: W4A16}
"""


def test_unknown_pipeline_key_names_file_key_and_line(tmp_path):
    path = _write(tmp_path, GOOD + "calibration:\n  num_sample: 3\n")
    with pytest.raises(UserError) as e:
        recipe.load(path)
    msg = str(e.value)
    assert "mine.yaml:7" in msg and "unknown key 'calibration.num_sample'" in msg
    assert "num_samples" in msg  # the valid keys are listed


def test_stage_keys_llmcompressor_would_silently_skip_are_rejected(tmp_path):
    path = _write(tmp_path, GOOD.replace("quant_stage", "quant"))
    with pytest.raises(UserError, match="_stage"):
        recipe.load(path)


def test_malformed_yaml_reports_the_line(tmp_path):
    path = _write(tmp_path, "description: x\nquantization:\n  a: [1,\n  b: 2\n")
    with pytest.raises(UserError, match=r"mine.yaml:\d+: malformed YAML"):
        recipe.load(path)


def test_unknown_recipe_lists_the_valid_names():
    with pytest.raises(UserError) as e:
        recipe.load("nope")
    assert all(name in str(e.value) for name in recipe.shipped())


def test_recipes_command_prints_one_line_per_recipe(tmp_path):
    result = cli("recipes", runs=tmp_path)
    assert result.returncode == 0
    header, *lines = result.stdout.strip().splitlines()
    assert header.split()[:3] == ["recipe", "scheme", "how"] and "serves on (vLLM)" in header
    assert [line.split()[0] for line in lines] == recipe.shipped()
    serves = {line.split()[0]: line for line in lines}
    assert "GPU, CPU with AVX-512" in serves["gptq"] and "GPU, CPU with AMX" in serves["fp8-block"]
    assert "GPU, CPU with AVX-512" in serves["fp8-kv"]
    assert (
        "GPU, CPU " in serves["fp8"]
        and " GPU " in serves["w8a16"]
        and " GPU " in serves["vllm-fp8"]
    )
    # NVIDIA compute capability: native FP4 on Blackwell, FP8 from Ada; Marlin from Turing
    assert " GPU  " in serves["nvfp4"] and "10.0+ (7.5+ Marlin)" in serves["nvfp4"]
    assert "8.9+ (7.5+ Marlin)" in serves["fp8-block"] and " 7.5+ " in serves["gptq"]


def test_online_recipes_have_no_quantization_section_and_others_need_one(tmp_path):
    from pipeline.core.errors import UserError

    both = "description: x\nonline: fp8\nquantization:\n  s_stage:\n    m_modifiers:\n"
    both += "      QuantizationModifier: {targets: [Linear], scheme: FP8_DYNAMIC}\n"
    with pytest.raises(UserError, match="leave out the quantization section"):
        recipe.load(str(_write(tmp_path, both)))
    with pytest.raises(UserError, match="needs at least one <name>_stage"):
        recipe.load(str(_write(tmp_path, "description: x\n")))
    with pytest.raises(UserError, match="online"):
        recipe.load(str(_write(tmp_path, "description: x\nonline: int3\n")))
    online = recipe.load(str(_write(tmp_path, "description: x\nonline: fp8\n")))
    assert online.engine_args() == ["--quantization", "fp8"] and online.scheme().weight_bits == 8
