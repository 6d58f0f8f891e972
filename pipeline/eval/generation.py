"""Generation drift: both models' greedy answers to the same prompts, compared prompt by prompt.

An answer is its generated token ids (the end-of-sequence token not counted) and whether it
ended by itself (EOS) or at `max_new_tokens` (truncated). Per pair of runs:
- the mean answer length of each, and their ratio (second / first) with a paired percentile
  bootstrap CI over prompts (scipy.stats.bootstrap, seeded: the same answers give the same CI);
- the EOS and truncation rates of each;
- how many answers are token-for-token identical, and for the others the first token where
  they part (median and smallest);
- where the tokenizer has a reasoning end marker (`</think>`), how often each emits it.
Against a limit (the recipe's `max_length_ratio`): the CI's upper end ≤ limit → pass, its lower
end > limit → fail, else inconclusive. The original against itself at another batch size is the
noise floor of all of it (greedy decoding can part on a near tie when the sums change order).
"""

import statistics

from pipeline.eval.paired_tasks import RESAMPLES, SEED

THINK_END = "</think>"

# numpy and scipy imported where used: the gates read stored results without them (a cached
# eval answers in under a second)


def answer(ids: list[int], eos_ids: set[int], max_new_tokens: int) -> dict:
    """{"ids", "eos"}: the ids up to the first EOS (excluded) and whether one came."""
    for i, token in enumerate(ids):
        if token in eos_ids:
            return {"ids": ids[:i], "eos": True}
    return {"ids": ids[:max_new_tokens], "eos": False}


def compare(first: list[dict], second: list[dict], max_new_tokens: int, think_end: int | None,
            confidence: float) -> dict:  # fmt: skip
    """The second run's answers against the first's, prompt by prompt (same prompts, same
    order)."""
    import numpy as np

    if len(first) != len(second):
        raise ValueError(f"{len(first)} answers against {len(second)}: not the same prompts")
    o = np.array([len(a["ids"]) for a in first], float)
    q = np.array([len(a["ids"]) for a in second], float)
    parted = [_parting(a["ids"], b["ids"]) for a, b in zip(first, second, strict=True)]
    diverged = [p for p in parted if p is not None]
    low, high = _ratio_ci(o, q, confidence)
    return {
        "prompts": len(first),
        "max_new_tokens": max_new_tokens,
        "mean_tokens_original": float(o.mean()),
        "mean_tokens_quantized": float(q.mean()),
        "length_ratio": float(q.mean() / o.mean()) if o.mean() else None,
        "length_ratio_low": low,
        "length_ratio_high": high,
        "confidence": confidence,
        "eos_rate_original": _rate(a["eos"] for a in first),
        "eos_rate_quantized": _rate(a["eos"] for a in second),
        "truncated_rate_original": _truncated(first, max_new_tokens),
        "truncated_rate_quantized": _truncated(second, max_new_tokens),
        "identical": len(first) - len(diverged),
        "first_divergence_median": statistics.median(diverged) if diverged else None,
        "first_divergence_min": min(diverged) if diverged else None,
        "think_end_rate_original": _think_rate(first, think_end),
        "think_end_rate_quantized": _think_rate(second, think_end),
    }


def length_gate(drift: dict, limit: float) -> tuple[str, str]:
    """("pass" | "fail" | "inconclusive", one line for people)."""
    ratio, low, high = drift["length_ratio"], drift["length_ratio_low"], drift["length_ratio_high"]
    if ratio is None:
        return "inconclusive", "inconclusive: the original's answers are all empty"
    level = f"{drift['confidence'] * 100:g}%"
    span = f"×{ratio:.3f}, {level} CI [{low:.3f}, {high:.3f}] over {drift['prompts']} prompts"
    if high <= limit:
        return "pass", f"answers no longer than ×{limit:g} the original's at {level} ({span})"
    if low > limit:
        return "fail", f"answers longer than ×{limit:g} the original's at {level} ({span})"
    return "inconclusive", (
        f"inconclusive: {drift['prompts']} prompts cannot show ×{limit:g} at {level} ({span}); "
        "give more prompts (eval.generation.prompts) or a larger max_new_tokens"
    )


def _ratio_ci(o, q, confidence: float) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI of mean(q) / mean(o), resampling prompts (pairs together)."""
    import numpy as np
    from scipy import stats

    if not o.mean():
        return None, None
    if np.array_equal(o, q):  # every resample's ratio is 1
        return 1.0, 1.0

    def ratio(first, second, axis=-1):
        # a resample of only empty original answers has no ratio: counted as no change
        denominator = first.mean(axis=axis)
        return np.divide(second.mean(axis=axis), denominator,
                         out=np.ones_like(denominator), where=denominator > 0)  # fmt: skip

    res = stats.bootstrap(
        (o, q),
        ratio,
        paired=True,
        vectorized=True,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _parting(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two answers differ; None when identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _rate(flags) -> float:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else 0.0


def _truncated(answers: list[dict], max_new_tokens: int) -> float:
    return _rate(not a["eos"] and len(a["ids"]) >= max_new_tokens for a in answers)


def _think_rate(answers: list[dict], think_end: int | None) -> float | None:
    return None if think_end is None else _rate(think_end in a["ids"] for a in answers)
