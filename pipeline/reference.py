"""The original model's compact outputs on a token set, computed once and cached.

Stored per (model, windows, top-k, backend) under runs/<model>/original/reference/ as a
torch file of the columns pipeline.drift.compact makes: k × (4 + 4) + 8 bytes per token
(k = 32: 264 bytes/token; llama.cpp's full logits for Llama 3 take 128,256 × 4 ≈ 513 KB/token).
"""

import os
from pathlib import Path

import torch

from pipeline import drift, progress
from pipeline.fsutil import sha256_json, waiting_lock


def key(model_identity: dict, windows: torch.Tensor, top_k: int, backend: str) -> str:
    import hashlib

    tokens = hashlib.sha256(windows.numpy().tobytes()).hexdigest()
    return sha256_json([model_identity, tokens, list(windows.shape), top_k, backend])[:16]


def bytes_per_token(ref: dict[str, torch.Tensor]) -> float:
    n = ref["target_logp"].numel()
    return sum(t.numel() * t.element_size() for t in ref.values()) / n


def load_or_build(folder: Path, name: str, build) -> tuple[dict, bool]:
    """(reference, was_cached). `build()` returns the reference dict when it is missing."""
    path = folder / f"{name}.pt"
    folder.mkdir(parents=True, exist_ok=True)
    with waiting_lock(folder / f".{name}.lock"):
        if path.is_file():
            return torch.load(path), True
        ref = build()
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        torch.save(ref, tmp)
        os.replace(tmp, path)
    return ref, False


def compute(backend, model, windows: torch.Tensor, top_k: int, desc: str) -> dict:
    parts = []
    targets = windows[:, 1:]
    bar = progress.bar(total=len(windows), desc=desc, unit="window")
    for i, logp in enumerate(backend.logprobs(model, windows)):
        parts.append(drift.compact(logp, targets[i], top_k))
        bar.update()
    bar.close()
    return drift.concat(parts)
