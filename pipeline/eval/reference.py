"""The original model's compact outputs on a token set, computed once and cached.

Stored per (model, windows, kept mass, backend) under runs/<model>/original/reference/ as a
torch file of the columns pipeline.eval.drift.compact makes: k × (2 or 4 + 4) + 12 bytes per token,
k the tokens kept at that position (llama.cpp's full logits for Llama 3 take 128,256 × 4 ≈
513 KB/token). tiny-llama is very flat (entropy ~6 nats): it keeps ~2,550 of 4,096 tokens.
"""

import os
from pathlib import Path

import torch

from pipeline.config.recipe import EvalSettings
from pipeline.core import progress
from pipeline.eval import drift, reference_key


def bytes_per_token(ref: dict[str, torch.Tensor]) -> float:
    n = ref["target_logp"].numel()
    return sum(t.numel() * t.element_size() for t in ref.values()) / n


def load(folder: Path, name: str) -> dict | None:
    path = reference_key.stored(folder, name)
    return torch.load(path) if path.is_file() else None


def save(folder: Path, name: str, ref: dict) -> None:
    path = reference_key.stored(folder, name)
    # hidden while written: another process committing this folder to an object store (cells
    # of one model share its reference) skips it, as it skips every temporary file here
    tmp = folder / f".{name}.pt.tmp-{os.getpid()}"
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


def compute(backend, model, groups: list[torch.Tensor], settings: EvalSettings) -> list[dict]:
    mass, max_k = settings.reference_mass, settings.reference_max_k
    parts: list[list[dict]] = [[] for _ in groups]
    for g, i, logp in stream(backend, model, groups, "reference (original model)"):
        parts[g].append(drift.compact(logp, groups[g][i, 1:], mass, max_k))
    return [drift.concat(p) for p in parts]
