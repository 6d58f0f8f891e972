"""A view of a quantized MoE artifact that transformers can load (the hf eval backend).

transformers 5 fuses each layer's experts into 3-D tensors as it loads, dequantizing quantized
experts to bf16 on the way (compressed-tensors' `DecompressExperts`). Two artifacts it cannot
take as written:
- Mixtral: llm-compressor's oneshot (and so the model-free path, which matches it) writes the
  experts as `experts.N.{gate,up,down}_proj`; transformers loads Mixtral by the hub's names,
  `experts.N.{w1,w3,w2}`. The view renames them.
- FP8 block-quantized experts (FP8_BLOCK): its FP8 expert path multiplies each weight by a
  per-channel scale and fails on (rows/128, columns/128) blocks. The view stores those experts
  dequantized to bf16 — what transformers would make of them — and drops their scales (its FP8
  path passes a weight without a scale through).
- NVFP4 experts: its packed expert path passes no `weight_global_scale` (weights come out
  global-scale times too large). The view divides each expert's scales by its global scale.
The view is a copy, written shard by shard; every other tensor keeps its bytes. Loaded, the
experts are bf16 (hf_load widens them to float32 for the CPU eval) and run with 16-bit
activations: the scheme's activation quantization applies to the attention Linears (recorded).
"""

import json
import re
import shutil
from pathlib import Path

from pipeline.core.files import staging_dir
from pipeline.models import checkpoint
from pipeline.quantize.artifact import tensors

FOLDER = "hf-view"  # inside the run dir, beside the artifact
_ONESHOT = re.compile(r"(\.experts\.\d+\.)(gate_proj|up_proj|down_proj)\.")
_EXPERT = re.compile(r"\.experts\.\d+\.")
_HUB = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}
RENAMED = (
    "llm-compressor writes Mixtral's experts one by one under their module names "
    "(experts.N.gate_proj/up_proj/down_proj), transformers fuses only the hub's names "
    "(experts.N.w1/w3/w2) into its 3-D expert tensors"
)
BLOCKS = "transformers dequantizes FP8 experts with one scale per output channel, not FP8 blocks"
GLOBAL = "transformers dequantizes NVFP4 experts without their global scale"


def reasons(artifact: Path) -> list[str]:
    """Why plain transformers cannot load `artifact` and the view can (empty: no view needed)."""
    config_path = Path(artifact) / "config.json"
    if not config_path.is_file():
        return []
    config = json.loads(config_path.read_text())

    names = [n for n in tensors(Path(artifact)) if _EXPERT.search(n)]
    found = []
    if config.get("model_type") == "mixtral" and any(_ONESHOT.search(n) for n in names):
        found.append(RENAMED)
    if checkpoint.compressed_fp8_blocks(config) and any(n.endswith(".weight_scale") for n in names):
        found.append(BLOCKS)
    if any(n.endswith(".weight_global_scale") for n in names):
        found.append(GLOBAL)
    return found


def needed(artifact: Path) -> bool:
    return bool(reasons(artifact))


def why(artifact: Path) -> str:
    return "; ".join(reasons(artifact)) + "; the pipeline's hf eval loads a view of it"


def ensure(artifact: Path, out: Path) -> Path:
    """The view of `artifact` at `out`, written once (staged, then renamed into place)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    if (out / "config.json").is_file():
        return out
    config = json.loads((Path(artifact) / "config.json").read_text())
    rename = config.get("model_type") == "mixtral"
    blocks = checkpoint.compressed_fp8_blocks(config)
    with staging_dir(out) as tmp:
        for path in sorted(Path(artifact).iterdir()):
            if path.suffix != ".safetensors":
                if path.is_file():
                    shutil.copy(path, tmp / path.name)
                continue
            with safe_open(path, "pt") as f:
                kept = {k: f.get_tensor(k) for k in f.keys()}
                metadata = f.metadata()
            if blocks:
                kept = _dequantized_experts(kept, blocks)
            kept = _folded_global_scales(kept)
            if rename:
                kept = {_hub_name(k): v for k, v in kept.items()}
            save_file(kept, tmp / path.name, metadata=metadata)
        index = tmp / "model.safetensors.index.json"
        if index.is_file():  # the shards' own names now (renamed, scales dropped)
            data = json.loads(index.read_text())
            data["weight_map"] = {n: p.name for p in tmp.glob("*.safetensors") for n in _names(p)}
            index.write_text(json.dumps(data, indent=2))
    return out


def _names(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        return list(f.keys())


def _dequantized_experts(tensors: dict, block: tuple[int, int]) -> dict:
    """Each FP8 expert weight × its block scales, in bf16 (as transformers' FP8 expert path
    computes it per channel); the expert's scale dropped."""
    import torch

    out = {}
    for name, value in tensors.items():
        if _EXPERT.search(name) and name.endswith(".weight_scale"):
            continue
        scale = tensors.get(f"{name}_scale") if name.endswith(".weight") else None
        if scale is None or not _EXPERT.search(name):
            out[name] = value
            continue
        rows, cols = value.shape
        full = scale.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)
        out[name] = (value.float() * full[:, :cols]).to(torch.bfloat16)
    return out


def _folded_global_scales(tensors: dict) -> dict:
    """NVFP4 experts: weight_scale / weight_global_scale in float32 (what compressed-tensors'
    dequantization computes first), the global scale dropped: transformers' expert path, which
    passes no global scale, then dequantizes them right."""
    out = {}
    for name, value in tensors.items():
        if _EXPERT.search(name) and name.endswith(".weight_global_scale"):
            continue
        glob = tensors.get(name.replace(".weight_scale", ".weight_global_scale"))
        if name.endswith(".weight_scale") and _EXPERT.search(name) and glob is not None:
            value = value.float() / glob.float()
        out[name] = value
    return out


def _hub_name(name: str) -> str:
    return _ONESHOT.sub(lambda m: f"{m[1]}{_HUB[m[2]]}.", name)
