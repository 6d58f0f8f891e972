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


def kl_by_window(first: Path, second: Path, windows: int, confidence: float = 0.95) -> dict:
    """first − second in mean KL over the heldout tokens, paired window by window: the windows'
    mean differences and a Student-t CI over them (tokens of one window are not independent:
    a window's hard passage moves every recipe's KL alike, so the window is the unit)."""
    import torch
    from scipy import stats

    a, b = torch.load(first)["heldout"]["kl"].double(), torch.load(second)["heldout"]["kl"].double()
    if a.shape != b.shape:
        raise ValueError(f"{first} and {second} scored different heldout tokens")
    d = torch.stack([part.mean() for part in torch.tensor_split(a - b, windows)])
    mean = d.mean().item()
    se = (d.std() / windows**0.5).item() if windows > 1 else float("inf")
    half = stats.t.ppf((1 + confidence) / 2, windows - 1) * se if windows > 1 else float("inf")
    return {"diff": mean, "se": se, "low": mean - half, "high": mean + half,
            "windows": windows, "confidence": confidence}  # fmt: skip


def verdict(diff: dict, floor: float) -> str:
    """For the first set against the second: better (it drifts less, the CI excludes 0 and the
    difference is beyond the noise floor's own mean KL), worse, or indistinguishable."""
    beyond = abs(diff["diff"]) > floor
    if diff["high"] < 0 and beyond:
        return "better"
    if diff["low"] > 0 and beyond:
        return "worse"
    return "indistinguishable"
