"""What a checkpoint's config.json says beside its shape: the format its weights ship in, the
dtype it was saved in, and the fields that decide its network (to tell whether an artifact is
a quantization of a base). The raw config stops here and in planning/geometry.py."""

# config.json fields that decide the network's shape (a quantization tool leaves them alone)
SHAPE = (
    "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "moe_intermediate_size",
    "num_local_experts", "num_experts", "num_experts_per_tok", "vocab_size",
    "tie_word_embeddings", "rope_parameters", "sliding_window",
)  # fmt: skip
FLOATS = ("float32", "float16", "bfloat16", "float64")


def fp8_blocks(config: dict) -> tuple[int, int] | None:
    """The (rows, columns) of the FP8 blocks an original ships in (DeepSeek-V3's
    `quant_method: fp8`, `weight_block_size`); None: 16-bit."""
    quant = config.get("quantization_config") or {}
    block = quant.get("weight_block_size")
    if quant.get("quant_method") == "fp8" and block:
        return int(block[0]), int(block[1])
    return None


def compressed_fp8_blocks(config: dict) -> tuple[int, int] | None:
    """The (rows, columns) of FP8 weight blocks a compressed-tensors artifact uses, else None."""
    quant = config.get("quantization_config") or {}
    for group in (quant.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        if weights.get("strategy") == "block" and weights.get("type") == "float":
            return tuple(weights["block_structure"])
    return None


def dtype_name(config: dict) -> str:
    """The dtype the checkpoint was saved in, as torch names it (bfloat16 when unsaid or not a
    floating dtype torch knows)."""
    name = str(config.get("dtype") or config.get("torch_dtype") or "bfloat16")
    name = name.removeprefix("torch.")
    return name if name in FLOATS else "bfloat16"


def shape_differences(base: dict, artifact: dict) -> list[str]:
    """Each field deciding the network that differs, "field artifact's vs base's"."""
    base, artifact = _text_config(base), _text_config(artifact)
    differ = [
        f"{k} {artifact.get(k)!r} vs {base.get(k)!r}"
        for k in SHAPE
        if (k in base or k in artifact) and base.get(k) != artifact.get(k)
    ]
    if base.get("architectures") and artifact.get("architectures"):
        if base["architectures"] != artifact["architectures"]:
            differ.insert(
                0, f"architectures {artifact['architectures']} vs {base['architectures']}"
            )
    return differ


def _text_config(config: dict) -> dict:
    """The language model's fields (a multimodal config keeps them in text_config) as this
    transformers reads them: configs saved by other versions name some fields differently
    (rope_theta became rope_parameters in transformers 5)."""
    from transformers import AutoConfig  # heavy: only an import compares configs

    text = config.get("text_config")
    config = {**config, **text} if isinstance(text, dict) else config
    try:
        fields = {k: v for k, v in config.items() if k != "model_type"}
        return AutoConfig.for_model(config["model_type"], **fields).to_dict()
    except Exception:  # an architecture this transformers does not know: compare as written
        return config
