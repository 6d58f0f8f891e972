"""Texts → fixed windows of token ids, the unit every evaluation backend scores.

Documents are joined into one stream (each followed by EOS) and cut into non-overlapping
windows of `context_length` tokens; the first token of each window is replaced by BOS, as
llama.cpp's perplexity does, and positions 1…n−1 are scored. The budget is in scored tokens.
"""

import torch


def windows(tokenizer, texts: list[str], context_length: int, max_tokens: int) -> torch.Tensor:
    stream: list[int] = []
    eos = tokenizer.eos_token_id
    per_window = context_length - 1
    wanted = -(-max_tokens // per_window) * context_length  # whole windows covering the budget
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


def fingerprint(windows: torch.Tensor) -> dict:
    """What a reference key needs of the windows: their hash and shape."""
    import hashlib

    return {
        "sha256": hashlib.sha256(windows.numpy().tobytes()).hexdigest(),
        "shape": list(windows.shape),
    }
