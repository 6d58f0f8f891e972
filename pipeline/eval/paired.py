"""Paired comparison of two evaluations over the same tokens (same reference, same windows): the
hard tokens that dominate every recipe's mean KL cancel in the per-token differences."""

from pathlib import Path


def kl_z(better: Path, worse: Path, splits: tuple[str, ...] = ("heldout",)) -> float:
    """How many standard errors `better` (an eval's tokens.pt) drifts less than `worse`, over
    the tokens of these splits."""
    import torch

    a, b = torch.load(better), torch.load(worse)
    diffs = []
    for split in splits:
        x, y = a[split]["kl"].double(), b[split]["kl"].double()
        if x.shape != y.shape:
            raise ValueError(f"{better} and {worse} scored different {split} tokens")
        diffs.append(y - x)
    d = torch.cat(diffs)
    return (d.mean() / (d.std() / d.numel() ** 0.5)).item()
