"""Which recipes need calibration data: our rule (pipeline/quantize/plan.py, no llm-compressor
import so that `make plan` stays fast) against llm-compressor's own. Here, not in tests/unit:
importing llm-compressor alone takes ~20 s on 2 cores."""

import pytest
import yaml

from pipeline.config import recipe
from pipeline.config.schemes import PRESETS
from pipeline.quantize import plan


def _theirs(rf: recipe.RecipeFile) -> bool:
    """llm-compressor's answer: its modifiers, built and validated from the recipe's
    quantization section (QuantizationMixin._set_requires_calibration_data runs as a pydantic
    validator), asked as oneshot asks them (CalibrationPipeline._infer_pipeline)."""
    from llmcompressor.recipe import Recipe

    modifiers = Recipe.from_dict(rf.spec.quantization).modifiers
    return any(m.requires_calibration_data for m in modifiers)


def _recipe(tmp_path, name: str, modifiers: dict) -> recipe.RecipeFile:
    """A recipe file of these modifiers, loaded as a user's would be."""
    data = {"description": name, "quantization": {"quant_stage": {"quant_modifiers": modifiers}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # order kept
    return recipe.load(str(path))


def test_shipped_recipes_need_calibration_data_as_llm_compressor_decides():
    """Guards plan.needs_calibration on every shipped recipe: a wrong answer skips calibration a
    recipe needs (quantize refuses num_samples 0 by it) or plans data a recipe never reads."""
    ours, theirs = {}, {}
    for rf in map(recipe.load, recipe.artifact_recipes()):  # online ones have no modifiers
        ours[rf.name], theirs[rf.name] = plan.needs_calibration(rf), _theirs(rf)
    assert ours == theirs
    # both answers occur, so the comparison can fail either way
    assert {n for n, needs in ours.items() if needs} >= {"gptq", "awq", "fp8-kv", "nvfp4"}
    assert {n for n, needs in ours.items() if not needs} >= {"fp8", "w4a16-rtn"}


def test_every_preset_needs_calibration_data_as_llm_compressor_decides(tmp_path):
    """Guards PRESETS' calibrated_activations (a hand-kept flag): each preset the pipeline
    supports, alone in a QuantizationModifier, against llm-compressor."""
    ours, theirs = {}, {}
    for name in PRESETS:
        rf = _recipe(tmp_path, name.lower(), {"QuantizationModifier": {"scheme": name}})
        ours[name], theirs[name] = plan.needs_calibration(rf), _theirs(rf)
    assert ours == theirs
    assert {n for n, needs in ours.items() if needs} == {"FP8", "NVFP4"}  # as measured


W4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
A8 = {"num_bits": 8, "type": "float", "strategy": "token"}


@pytest.mark.parametrize(
    "case, args",
    [
        # config_groups as users write them: compressed-tensors' `dynamic` defaults to static
        ("static-inputs-by-default", {"g": {"targets": ["Linear"], "weights": W4,
                                            "input_activations": {**A8, "strategy": "tensor"}}}),
        ("dynamic-inputs", {"g": {"targets": ["Linear"], "weights": W4,
                                  "input_activations": {**A8, "dynamic": True}}}),
        ("local-inputs", {"g": {"targets": ["Linear"], "weights": W4, "input_activations": {
            "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
            "dynamic": "local"}}}),
        ("static-outputs", {"g": {"targets": ["Linear"], "weights": W4,
                                  "output_activations": {**A8, "strategy": "tensor"}}}),
        ("weights-only", {"g": {"targets": ["Linear"], "weights": W4}}),
    ],
)  # fmt: skip
def test_config_groups_need_calibration_data_as_llm_compressor_decides(tmp_path, case, args):
    """Guards the config_groups half of the rule, which no shipped recipe exercises."""
    rf = _recipe(tmp_path, case, {"QuantizationModifier": {"config_groups": args}})
    assert plan.needs_calibration(rf) == _theirs(rf)


def test_a_preset_mapped_to_targets_is_read_whole(tmp_path):
    """`scheme: {W4A16: [...], FP8: [...]}`: static FP8 on some layers needs data, whichever
    preset comes first."""
    scheme = {"W4A16": ["re:.*mlp.*"], "FP8": ["re:.*self_attn.*"]}
    rf = _recipe(tmp_path, "mixed", {"QuantizationModifier": {"scheme": scheme}})
    assert plan.needs_calibration(rf) == _theirs(rf) is True
