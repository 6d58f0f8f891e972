"""Which format a checkpoint is in, from the config files the tools write."""

import json

import pytest

from pipeline.config.schemes import schemes_from_args
from pipeline.core.errors import UserError
from pipeline.external import formats


def _folder(tmp_path, quantization_config=None, **side_files):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name, data in side_files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return tmp_path


def _scheme(fmt):
    return schemes_from_args(fmt.modifier())[0][0]


def test_autogptq_v1_from_config(tmp_path):
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
    fmt = formats.detect(_folder(tmp_path, qc), "x")
    assert (fmt.method, fmt.packing, fmt.hf) == ("gptq", "gptq v1", "gptq")
    assert _scheme(fmt).name == "W4A16"
    assert fmt.ignore == ["lm_head"]


def test_gptqmodel_v2_and_act_order(tmp_path):
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": False, "desc_act": True,
          "checkpoint_format": "gptq_v2", "meta": {"quantizer": ["gptqmodel:4.0"]}}  # fmt: skip
    fmt = formats.detect(_folder(tmp_path, qc), "x")
    assert fmt.packing == "gptq_v2" and fmt.producer == "gptqmodel:4.0"
    assert fmt.weights["actorder"] == "group" and fmt.weights["symmetric"] is False
    assert _scheme(fmt).group_size == 32


def test_old_autogptq_side_file(tmp_path):
    fmt = formats.detect(
        _folder(tmp_path, None, quantize_config={"bits": 8, "group_size": -1}), "x"
    )
    assert fmt.method == "gptq" and fmt.weights["strategy"] == "channel"
    assert _scheme(fmt).weight_bits == 8


def test_a_marlin_layout_is_refused(tmp_path):
    qc = {"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"}
    with pytest.raises(UserError, match="checkpoint_format 'marlin'"):
        formats.detect(_folder(tmp_path, qc), "x")


def test_three_bit_gptq_is_vllm_only(tmp_path):
    fmt = formats.detect(_folder(tmp_path, {"quant_method": "gptq", "bits": 3}), "x")
    assert fmt.hf is None and "3-bit" in fmt.hf_refusal


def test_autoawq_gemm_and_gemv(tmp_path):
    qc = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
          "version": "gemm"}  # fmt: skip
    fmt = formats.detect(_folder(tmp_path, qc), "x")
    assert (fmt.method, fmt.hf) == ("awq", "awq") and _scheme(fmt).name == "W4A16_ASYM"
    with pytest.raises(UserError, match="AWQ 'gemv' packing"):
        formats.detect(_folder(tmp_path, {**qc, "version": "GEMV"}), "x")


def test_autoawq_side_file(tmp_path):
    side = {"w_bit": 4, "q_group_size": 64, "zero_point": True, "version": "GEMM"}
    fmt = formats.detect(_folder(tmp_path, None, quant_config=side), "x")
    assert fmt.method == "awq" and fmt.weights["group_size"] == 64


@pytest.mark.parametrize(
    "packing, method, hf",
    [("auto_round:auto_gptq", "gptq", "gptq"), ("auto_round:auto_awq", "awq", "awq")],
)
def test_auto_round_packings(tmp_path, packing, method, hf):
    qc = {"quant_method": "intel/auto-round", "bits": 4, "group_size": 128, "sym": True,
          "packing_format": packing, "autoround_version": "0.15.1"}  # fmt: skip
    fmt = formats.detect(_folder(tmp_path, qc), "x")
    assert (fmt.method, fmt.hf, fmt.producer) == (method, hf, "AutoRound 0.15.1")
    assert _scheme(fmt).name == "W4A16"


def test_compressed_tensors_is_native(tmp_path):
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 4, "type": "int", "symmetric": True, "group_size": 128,
              "strategy": "group"}}}}  # fmt: skip
    fmt = formats.detect(_folder(tmp_path, qc), "x")
    assert fmt.hf == "native" and _scheme(fmt).name == "W4A16"


@pytest.mark.parametrize(
    "qc, scheme",
    [
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "FP8_DYNAMIC"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "NVFP4"),
    ],
)
def test_gpu_formats_are_vllm_only(tmp_path, qc, scheme):
    fmt = formats.detect(_folder(tmp_path, qc), "x")
    assert fmt.hf is None and fmt.hf_refusal
    found = _scheme(fmt)
    assert (found.weight_bits, found.weight_type) == (
        {"FP8_DYNAMIC": 8, "NVFP4": 4}[scheme],
        "float",
    )


def test_modelopt_side_file(tmp_path):
    side = {"quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
    fmt = formats.detect(_folder(tmp_path, None, hf_quant_config=side), "x")
    assert fmt.method == "modelopt" and fmt.packing == "modelopt fp8"


def test_unquantized_and_unknown_are_one_line(tmp_path):
    with pytest.raises(UserError, match="not a quantized checkpoint"):
        formats.detect(_folder(tmp_path), "x")
    with pytest.raises(UserError, match="quant_method 'bitsandbytes'"):
        formats.detect(_folder(tmp_path, {"quant_method": "bitsandbytes"}), "x")
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        formats.detect(tmp_path, "x")
