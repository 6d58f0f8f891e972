"""An artifact must be a quantization of its base: the refusals name what differs."""

import pytest

from pipeline.core.errors import UserError
from pipeline.external import match, source
from pipeline.models import checkpoint
from pipeline.models.tiny.spec import CONFIG


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"vocab_size": 8192}, "vocab_size 8192 vs 4096"),
        ({"num_hidden_layers": 2}, "num_hidden_layers 2 vs 4"),
        ({"num_key_value_heads": 4}, "num_key_value_heads 4 vs 2"),
        ({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}, "architectures"),
    ],
)
def test_shape_differences_are_named(changes, expected):
    with pytest.raises(UserError, match="is not a quantization of tiny-llama") as e:
        match.check_architecture(
            "tiny-llama", "art", checkpoint.shape_differences(dict(CONFIG), {**CONFIG, **changes})
        )
    assert expected in str(e.value)


def test_fields_saved_under_other_names_are_the_same_model():
    """transformers 5 saves rope_theta inside rope_parameters: the same value, no refusal."""
    saved = {k: v for k, v in CONFIG.items() if k != "rope_theta"}
    saved["rope_parameters"] = {"rope_type": "default", "rope_theta": CONFIG.get("rope_theta", 1e4)}
    saved["quantization_config"] = {"quant_method": "gptq"}
    match.check_architecture("tiny-llama", "art", checkpoint.shape_differences(dict(CONFIG), saved))


def test_artifact_names(tmp_path):
    (tmp_path / "My Model-GPTQ").mkdir()
    local = source.resolve(str(tmp_path / "My Model-GPTQ"))
    assert local.run_name == "external-My-Model-GPTQ" and local.path
    hub = source.resolve("TheBloke/Llama-2-7B-GPTQ@gptq-4bit-32g-actorder_True")
    assert (hub.hub_id, hub.revision) == ("TheBloke/Llama-2-7B-GPTQ", "gptq-4bit-32g-actorder_True")
    assert hub.run_name == "external-TheBloke--Llama-2-7B-GPTQ@gptq-4bit-32g-actorder_True"
    for bad in ("", "not a folder", str(tmp_path / "missing/x/y")):
        with pytest.raises(UserError):
            source.resolve(bad)
