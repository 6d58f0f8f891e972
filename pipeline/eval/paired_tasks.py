"""One lm-eval task on the original and the quantized model, item by item (lm-eval's
`log_samples`, paired by doc id): which answers changed, and the change with its spread.

Binary metrics (acc, exact_match): flips right → wrong and wrong → right, and McNemar's exact
test (a two-sided binomial test of the discordant pairs against ½: only the items that changed
say anything about which model is better). Every metric: the mean paired difference
(quantized − original) with a percentile bootstrap CI over items (scipy.stats.bootstrap,
paired, RESAMPLES draws, seeded: the same items give the same interval).

Non-inferiority (the recipe's `max_drop` at `confidence`): the CI's lower end ≥ −max_drop →
pass; its upper end < −max_drop → fail; else inconclusive, with the items that would decide it:
a CI's half-width shrinks as 1/√n, so n' = n × (half-width / |change + max_drop|)², if the
per-item spread and the change stay as measured.
"""

import math

SEED = 0
RESAMPLES = 9999  # bootstrap draws: the CI's ends move by < 0.1 point between seeds at n = 200


# numpy and scipy imported where used: the gates read stored results without them (a cached
# eval answers in under a second)


def pair(original: dict[str, float], quantized: dict[str, float]) -> tuple:
    """(original, quantized) per-item values in doc-id order; both must hold the same items."""
    import numpy as np

    if original.keys() != quantized.keys():
        only = sorted(original.keys() ^ quantized.keys())[:5]
        raise ValueError(f"the two runs scored different items (e.g. doc ids {only})")
    ids = sorted(original, key=lambda i: (len(i), i))
    return tuple(np.array([run[i] for i in ids], float) for run in (original, quantized))


def is_binary(*values) -> bool:
    import numpy as np

    return all(np.isin(v, (0.0, 1.0)).all() for v in values)


def change_ci(o, q, confidence: float) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(q − o), resampling items (pairs stay together)."""
    import numpy as np
    from scipy import stats

    d = q - o
    if np.all(d == d[0]):  # every resample has the same mean: the interval is that point
        return float(d[0]), float(d[0])
    res = stats.bootstrap(
        (d,),
        np.mean,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def compare(original: dict[str, float], quantized: dict[str, float], confidence: float) -> dict:
    """Flips, McNemar's exact p (binary metrics) and the change's CI at `confidence`."""
    import numpy as np
    from scipy import stats

    o, q = pair(original, quantized)
    low, high = change_ci(o, q, confidence)
    out = {
        "items": len(o),
        "change": float(np.mean(q - o)),
        "change_low": low,
        "change_high": high,
        "confidence": confidence,
        "binary": is_binary(o, q),
        "right_to_wrong": None,
        "wrong_to_right": None,
        "mcnemar_p": None,
    }
    if out["binary"]:
        worse = int(np.sum((o == 1) & (q == 0)))
        better = int(np.sum((o == 0) & (q == 1)))
        p = stats.binomtest(worse, worse + better, 0.5).pvalue if worse + better else 1.0
        out |= {"right_to_wrong": worse, "wrong_to_right": better, "mcnemar_p": float(p)}
    return out


def non_inferiority(paired: dict, max_drop: float) -> tuple[str, str]:
    """("pass" | "fail" | "inconclusive", one line for people)."""
    n, change = paired["items"], paired["change"]
    low, high = paired["change_low"], paired["change_high"]
    margin, level = f"{max_drop * 100:g}-point", f"{paired['confidence'] * 100:g}%"
    span = f"change {change * 100:+.1f} points, CI [{low * 100:+.1f}, {high * 100:+.1f}]"
    if low >= -max_drop:
        return "pass", f"not worse by more than a {margin} margin at {level} ({span})"
    if high < -max_drop:
        return "fail", f"worse by more than the {margin} margin at {level} ({span})"
    return "inconclusive", (
        f"inconclusive: {n} items cannot show a {margin} margin at {level}; "
        f"{_deciding_items(n, low, high, change, max_drop)} ({span})"
    )


def _deciding_items(n: int, low: float, high: float, change: float, max_drop: float) -> str:
    gap = abs(change + max_drop)
    if gap == 0:
        return "no sample size would: the change sits on the margin"
    needed = math.ceil(round(n * ((high - low) / 2 / gap) ** 2, 6))  # 800.0000001 is 800
    return f"~{needed:,} items would, if the change held"
