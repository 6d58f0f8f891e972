"""An external artifact must be a quantization of the base it is compared with: the same
architecture and the same tokenizer, or its drift would measure a different model. Checked up
front; a mismatch is one line naming what differs."""

from pathlib import Path

from pipeline.core.errors import UserError, first_line

# config.json fields that decide the network's shape (a quantization tool leaves them alone)
SHAPE = (
    "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "moe_intermediate_size",
    "num_local_experts", "num_experts", "num_experts_per_tok", "vocab_size",
    "tie_word_embeddings", "rope_parameters", "sliding_window",
)  # fmt: skip


def check_architecture(base_name: str, base: dict, shown: str, artifact: dict) -> None:
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
    if differ:
        raise UserError(
            f"{shown} is not a quantization of {base_name}: {'; '.join(differ[:4])} "
            "(artifact vs base)"
        )


def check_tokenizer(
    base_name: str, base: Path | str, revision: str | None, shown: str, artifact_dir: Path
) -> None:
    """Same vocabulary (every token at the same id) and the same special tokens. `base`: the
    base's folder, or its hub id (only its tokenizer files are fetched)."""
    from transformers import AutoTokenizer

    try:
        theirs = AutoTokenizer.from_pretrained(artifact_dir)
    except Exception as e:
        raise UserError(f"{shown}: its tokenizer does not load ({first_line(e)})") from None
    try:
        ours = AutoTokenizer.from_pretrained(base, revision=revision)
    except Exception as e:  # offline, gated: one line
        raise UserError(f"cannot load the tokenizer of {base_name}: {first_line(e)}") from None
    a, b = theirs.get_vocab(), ours.get_vocab()
    if a != b:
        moved = sum(1 for tok, i in b.items() if a.get(tok) != i)
        raise UserError(
            f"{shown} is not a quantization of {base_name}: its tokenizer differs "
            f"({len(a):,} vs {len(b):,} tokens, {moved:,} of the base's at another id or missing)"
        )
    for special in ("bos_token_id", "eos_token_id"):
        if getattr(theirs, special) != getattr(ours, special):
            raise UserError(
                f"{shown} is not a quantization of {base_name}: {special} "
                f"{getattr(theirs, special)} vs {getattr(ours, special)} (artifact vs base)"
            )


def _text_config(config: dict) -> dict:
    """The language model's fields (a multimodal config keeps them in text_config) as this
    transformers reads them: configs saved by other versions name some fields differently
    (rope_theta became rope_parameters in transformers 5)."""
    from transformers import AutoConfig

    text = config.get("text_config")
    config = {**config, **text} if isinstance(text, dict) else config
    try:
        fields = {k: v for k, v in config.items() if k != "model_type"}
        return AutoConfig.for_model(config["model_type"], **fields).to_dict()
    except Exception:  # an architecture this transformers does not know: compare as written
        return config
