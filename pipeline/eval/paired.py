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


def across_draws(first: list[float], second: list[float], confidence: float = 0.95) -> dict:
    """first − second in mean KL where each set was drawn several times (calibration seeds):
    the difference of the draws' means with a Student-t CI from the spread between draws of
    the same set (pooled variance, n₁ + n₂ − 2 degrees of freedom). This is the uncertainty of
    "which data calibrates better": a window-paired CI holds the tokens fixed but not the
    draw, and two draws of one set can differ more than two sets do."""
    import statistics

    from scipy import stats

    n1, n2 = len(first), len(second)
    diff = statistics.fmean(first) - statistics.fmean(second)
    dof = n1 + n2 - 2
    if n1 < 2 or n2 < 2:
        return {"diff": diff, "se": None, "low": None, "high": None, "draws": [n1, n2]}
    pooled = ((n1 - 1) * statistics.variance(first) + (n2 - 1) * statistics.variance(second)) / dof
    se = (pooled * (1 / n1 + 1 / n2)) ** 0.5
    half = stats.t.ppf((1 + confidence) / 2, dof) * se
    return {"diff": diff, "se": se, "low": diff - half, "high": diff + half, "draws": [n1, n2],
            "spread": [statistics.stdev(first), statistics.stdev(second)],
            "confidence": confidence}  # fmt: skip
