"""A view of a quantized Mixtral artifact that transformers can load (the hf eval backend).

llm-compressor's oneshot (and so the model-free path, which matches it) writes Mixtral's experts
as `block_sparse_moe.experts.N.{gate,up,down}_proj`; transformers 5 loads Mixtral checkpoints
by the hub's names, `experts.N.{w1,w3,w2}`, and fuses them into its 3-D expert tensors. The
view is a copy with only those names changed, written shard by shard (same bytes). Loaded,
compressed-tensors dequantizes each expert exactly into the fused tensors (bf16); hf_load widens
them to float32 for the CPU eval. The experts then run with 16-bit activations: FP8_DYNAMIC's
per-token activation quantization applies to the attention Linears, not to them (recorded).
Other MoE families (Qwen-MoE, DeepSeek) load the artifact's own names the same way.
"""

import json
import re
import shutil
from pathlib import Path

FOLDER = "hf-view"  # inside the run dir, beside the artifact
_ONESHOT = re.compile(r"(\.experts\.\d+\.)(gate_proj|up_proj|down_proj)\.")
_HUB = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}


def needed(artifact: Path) -> bool:
    """Is this a Mixtral artifact with oneshot's expert names?"""
    config = Path(artifact) / "config.json"
    if not config.is_file() or json.loads(config.read_text()).get("model_type") != "mixtral":
        return False
    from pipeline.quantize.artifact import tensors

    return any(_ONESHOT.search(name) for name in tensors(Path(artifact)))


def ensure(artifact: Path, out: Path) -> Path:
    """The view of `artifact` at `out`, written once (staged, then renamed into place)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from pipeline.core.files import staging_dir

    if (out / "config.json").is_file():
        return out
    with staging_dir(out) as tmp:
        for path in sorted(Path(artifact).iterdir()):
            if path.suffix != ".safetensors":
                if path.is_file():
                    shutil.copy(path, tmp / path.name)
                continue
            with safe_open(path, "pt") as f:
                renamed = {_hub_name(k): f.get_tensor(k) for k in f.keys()}
                metadata = f.metadata()
            save_file(renamed, tmp / path.name, metadata=metadata)
        index = tmp / "model.safetensors.index.json"
        if index.is_file():
            data = json.loads(index.read_text())
            data["weight_map"] = {_hub_name(k): v for k, v in data["weight_map"].items()}
            index.write_text(json.dumps(data, indent=2))
    return out


def _hub_name(name: str) -> str:
    return _ONESHOT.sub(lambda m: f"{m[1]}{_HUB[m[2]]}.", name)
