"""Load a causal LM with transformers in float32 on CPU (exact), FP4 checkpoints included.

compressed-tensors decompresses FP4 (NVFP4, MXFP4) weights to bfloat16 whatever dtype the model
was asked for, and transformers refuses `.float()` on a quantized model: a float32 load then fails
in its first matmul ("expected m1 and m2 to have the same dtype"). So FP4 checkpoints are
decompressed at load and their dequantized weights widened to float32 — exact, since every
bfloat16 is a float32. Activation quantization (NVFP4's calibrated global input scales) stays
where compressed-tensors puts it: in each Linear's forward.
"""

import json
import warnings
from pathlib import Path


def fp4_weights(model_dir: Path) -> bool:
    """Does the checkpoint store FP4 (4-bit float) weights?"""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return False
    quant = json.loads(path.read_text()).get("quantization_config") or {}
    return any(
        ((group or {}).get("weights") or {}).get("type") == "float"
        and ((group or {}).get("weights") or {}).get("num_bits") == 4
        for group in (quant.get("config_groups") or {}).values()
    )


def from_pretrained(model_dir: Path, dtype, **kwargs):
    """AutoModelForCausalLM.from_pretrained, widening FP4 checkpoints to float32 when asked."""
    import torch
    from transformers import AutoModelForCausalLM

    fp4 = dtype is torch.float32 and fp4_weights(model_dir)
    if not fp4:
        loaded = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kwargs)
        if dtype is torch.float32:  # MoE experts dequantized into fused bf16 tensors
            _widen(loaded[0] if isinstance(loaded, tuple) else loaded, every=True)
        return loaded
    from transformers import CompressedTensorsConfig

    with warnings.catch_warnings():  # "the model's quantization_config will be used": intended
        warnings.simplefilter("ignore", UserWarning)
        loaded = AutoModelForCausalLM.from_pretrained(
            model_dir,
            dtype=dtype,
            quantization_config=CompressedTensorsConfig(dequantize=True),
            **kwargs,
        )
    _widen(loaded[0] if isinstance(loaded, tuple) else loaded)
    return loaded


def _widen(model, every: bool = False) -> None:
    """16-bit Linear weights and biases to float32; the (FP8, float32) scales stay as they are.
    `every`: any 16-bit parameter but scales and zero points (a quantized MoE's experts, which
    compressed-tensors dequantizes into transformers' fused bf16 tensors, and its routers)."""
    import torch

    for module in model.modules():
        for name, param in module._parameters.items():
            wanted = every and not name.endswith(("scale", "zero_point"))
            if param is None or not (wanted or name in ("weight", "bias")):
                continue
            if param.dtype in (torch.bfloat16, torch.float16):
                param.data = param.data.float()
