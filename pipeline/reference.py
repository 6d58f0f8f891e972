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


def lock(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    return waiting_lock(folder / ".lock")


def load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.pt"
    return torch.load(path) if path.is_file() else None


def save(folder: Path, name: str, ref: dict) -> None:
    path = folder / f"{name}.pt"
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    torch.save(ref, tmp)
    os.replace(tmp, path)


def stream(backend, model, groups: list[torch.Tensor], desc: str):
    """(group index, window index, log-probs) over several window sets in one backend call:
    vLLM starts once per model, not once per split."""
    sizes = [len(g) for g in groups]
    bar = progress.bar(total=sum(sizes), desc=desc, unit="window")
    owners = [(g, i) for g, n in enumerate(sizes) for i in range(n)]
    for (g, i), logp in zip(owners, backend.logprobs(model, torch.cat(groups)), strict=True):
        yield g, i, logp
        bar.update()
    bar.close()


def compute(backend, model, groups: list[torch.Tensor], top_k: int) -> list[dict]:
    parts: list[list[dict]] = [[] for _ in groups]
    for g, i, logp in stream(backend, model, groups, "reference (original model)"):
        parts[g].append(drift.compact(logp, groups[g][i, 1:], top_k))
    return [drift.concat(p) for p in parts]
