"""An artifact's weights dequantized by hand, with no compressed-tensors in the way: FP8 / INT8
weights × their per-channel scales, packed symmetric INT4 × their group scales. Written as a
plain float32 checkpoint under the original checkpoint's names (Mixtral's experts back to
w1 / w3 / w2), which transformers loads like the original."""

import json
import shutil
from pathlib import Path


def write(artifact: Path, out: Path) -> Path:
    import torch
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from safetensors.torch import load_file, save_file

    from pipeline.quantize.moe_view import _hub_name

    stored = {}
    for path in sorted(artifact.glob("*.safetensors")):
        stored |= load_file(path)
    config = json.loads((artifact / "config.json").read_text())
    bits = next(iter(config.pop("quantization_config")["config_groups"].values()))["weights"]
    bits = bits["num_bits"]
    modules = {n.rsplit(".", 1)[0] for n in stored if n.endswith(".weight_scale")}
    weights = {}
    for name, tensor in stored.items():
        module, _, param = name.rpartition(".")
        if module not in modules:
            weights[name] = tensor.float()
        elif param == "weight":  # FP8 / INT8, one scale per output channel
            weights[name] = tensor.float() * stored[f"{module}.weight_scale"].float()
        elif param == "weight_packed":
            rows, cols = stored[f"{module}.weight_shape"].tolist()
            values = unpack_from_int32(tensor, bits, torch.Size([rows, cols])).float()
            scale = stored[f"{module}.weight_scale"].float()  # [rows, groups]
            grouped = values.reshape(rows, scale.shape[1], -1) * scale[..., None]
            weights[f"{module}.weight"] = grouped.reshape(rows, cols)
    if config.get("model_type") == "mixtral":
        weights = {_hub_name(k): v for k, v in weights.items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({**config, "dtype": "float32"}))
    for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (artifact / extra).is_file():
            shutil.copy(artifact / extra, out / extra)
    return out


def fp8_dynamic_activations(model, artifact: Path) -> None:
    """FP8_DYNAMIC's per-token FP8 activations, by hand, on the Linears the artifact quantized
    that stay Linears in transformers (attention; the fused experts run 16-bit activations)."""
    import torch

    from pipeline.quantize.artifact import quantized_modules, tensors

    names = quantized_modules(tensors(artifact))

    def quantize(module, args):
        x = args[0]
        scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 448.0
        q = (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).to(x.dtype) * scale
        return (q, *args[1:])

    for name, module in model.named_modules():
        if name in names and isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(quantize)
