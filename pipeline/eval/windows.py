"""Texts → fixed windows of token ids, the unit every evaluation backend scores.

Documents are joined into one stream (each followed by EOS) and cut into non-overlapping
windows of `context_length` tokens; the first token of each window is replaced by BOS, as
llama.cpp's perplexity does, and positions 1…n−1 are scored. The budget is in scored tokens.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads where windows are cut, not where they are only counted (plans)
    import torch


def covering(context_length: int, max_tokens: int) -> int:
    """The whole windows that cover a budget of `max_tokens` scored tokens (the texts allowing)."""
    return -(-max_tokens // (context_length - 1))


def windows(tokenizer, texts: list[str], context_length: int, max_tokens: int) -> "torch.Tensor":
    import torch

    stream: list[int] = []
    eos = tokenizer.eos_token_id
    wanted = covering(context_length, max_tokens) * context_length
    for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]:
        stream.extend(ids)
        if eos is not None:
            stream.append(eos)
        if len(stream) >= wanted:
            break
    count = min(len(stream), wanted) // context_length
    if count == 0:
        return torch.empty(0, context_length, dtype=torch.long)
    out = torch.tensor(stream[: count * context_length], dtype=torch.long).view(count, -1)
    if tokenizer.bos_token_id is not None:
        out[:, 0] = tokenizer.bos_token_id
    return out


def fingerprint(windows: "torch.Tensor") -> dict:
    """What a reference key needs of the windows: their hash and shape."""
    import hashlib

    return {
        "sha256": hashlib.sha256(windows.numpy().tobytes()).hexdigest(),
        "shape": list(windows.shape),
    }
