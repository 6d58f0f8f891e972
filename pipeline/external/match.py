"""An external artifact must be a quantization of the base it is compared with: the same
architecture and the same tokenizer, or its drift would measure a different model. Checked up
front; a mismatch is one line naming what differs."""

from pathlib import Path

from pipeline.core.errors import UserError, first_line


def check_architecture(base_name: str, shown: str, differ: list[str]) -> None:
    """differ: models/checkpoint.shape_differences of the base's and the artifact's configs."""
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
