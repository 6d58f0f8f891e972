"""Small random-initialised models of real architectures, from the shipped configs, shrunk:
hidden 256, 2 layers, 4 heads of 64 (2 KV heads), MLP 768, experts cut to 8 of width 256,
tiny-llama's tokenizer (vocab 4,096). They build in seconds, offline, and exercise what the
family does differently (rope scaling, sliding windows, biases, tied embeddings, q/k norms,
routers and experts), though their weights mean nothing.

    python -m pipeline.models.zoo mixtral-8x7b /tmp/zoo/mixtral
"""

import json
import shutil
import sys
from pathlib import Path

from pipeline.models import aliases
from pipeline.models.tiny.build import ensure

SHRINK = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 1024,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
# Only where the family has the key. MLA keeps its widths: vLLM's MLA kernels take only the
# real latent + rope size (512 + 64; "Head dimension 160 is not supported by MLA").
EXPERTS = {"num_local_experts": 8, "num_experts": 8, "n_routed_experts": 8}
EXPERTS |= {"moe_intermediate_size": 256, "shared_expert_intermediate_size": 512}
# What other members of a family do: Qwen2.5 up to 3B ties its embeddings; Mistral 7B v0.1
# attends through a sliding window (4,096 of its 32k; here 128 of 1,024).
TWEAKS: dict[str, dict[str, bool | int]] = {
    "qwen2.5-7b": {"tie_word_embeddings": True},
    "mistral-7b": {"sliding_window": 128},
}
FAMILIES = (
    "llama3.1-8b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen3-8b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "qwen1.5-moe-a2.7b",
    "deepseek-v2-lite",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def shrunk_config(alias: str) -> dict:
    config = {**aliases.load_config(aliases.resolve(alias)), **SHRINK}
    for key, value in EXPERTS.items():
        if key in config:
            config[key] = value
    if "num_experts_per_tok" in config:
        config["num_experts_per_tok"] = min(config["num_experts_per_tok"], 2)
    if "kv_lora_rank" in config:  # MLA expands its latent to every head: no grouped KV
        config["num_key_value_heads"] = config["num_attention_heads"]
    config |= TWEAKS.get(alias, {})
    for key in ("max_window_layers", "mlp_only_layers"):
        config.pop(key, None)
    return config


def build(alias: str, out: Path, seed: int = 0, layers: int | None = None) -> Path:
    """A random-init model of `alias`'s architecture in `out` (bf16 safetensors + tokenizer);
    `layers` decoder layers instead of the shrunk 2 (a slower calibration, layer by layer)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = shrunk_config(alias)
    if layers:
        config["num_hidden_layers"] = layers
    model_type = config.pop("model_type")
    for key in ("architectures", "torch_dtype", "dtype", "transformers_version"):
        config.pop(key, None)
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **config)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tiny = ensure()
    for name in TOKENIZER_FILES:
        if (tiny / name).is_file():
            shutil.copy(tiny / name, out / name)
    made = {"alias": alias, "seed": seed, **({"layers": layers} if layers else {})}
    (out / "zoo.json").write_text(json.dumps(made) + "\n")
    return out


if __name__ == "__main__":
    print(build(sys.argv[1], Path(sys.argv[2])))
