"""Paired task statistics: McNemar's exact p and the bootstrap CI of a constructed pair of
per-item results, each checked against a value computed here independently of scipy."""

import math

import numpy as np
import pytest

from pipeline.config.recipe import EvalSettings, TaskSpec
from pipeline.eval import paired_tasks, tasks
from pipeline.eval.gates import check_gates


def _runs(both_right: int, right_to_wrong: int, wrong_to_right: int, both_wrong: int):
    pairs = (
        [(1, 1)] * both_right
        + [(1, 0)] * right_to_wrong
        + [(0, 1)] * wrong_to_right
        + [(0, 0)] * both_wrong
    )
    original = {str(i): float(o) for i, (o, _) in enumerate(pairs)}
    quantized = {str(i): float(q) for i, (_, q) in enumerate(pairs)}
    return original, quantized


def _exact_bootstrap_quantiles(counts: dict[int, int], level: float) -> tuple[float, float]:
    """Percentile ends of the exact bootstrap distribution of the mean paired difference: the
    sum of n draws from the items' differences is the n-fold convolution of their pmf."""
    n = sum(counts.values())
    pmf = np.array([counts.get(-1, 0), counts.get(0, 0), counts.get(1, 0)], float) / n
    total = np.array([1.0])
    for _ in range(n):
        total = np.convolve(total, pmf)
    means = (np.arange(len(total)) - n) / n  # sums −n … n
    cdf = np.cumsum(total)
    tail = (1 - level) / 2
    return means[np.searchsorted(cdf, tail)], means[np.searchsorted(cdf, 1 - tail)]


def test_mcnemar_p_is_the_exact_binomial_tail_of_the_flips():
    original, quantized = _runs(both_right=10, right_to_wrong=5, wrong_to_right=1, both_wrong=4)
    out = paired_tasks.compare(original, quantized, 0.95)
    # two-sided exact: 2 × P(X ≤ 1), X ~ Binomial(6, ½) = 2 × (1 + 6) / 64
    assert out["mcnemar_p"] == pytest.approx(2 * (math.comb(6, 0) + math.comb(6, 1)) / 2**6)
    assert (out["right_to_wrong"], out["wrong_to_right"], out["items"]) == (5, 1, 20)
    assert out["change"] == pytest.approx((1 - 5) / 20)


def test_bootstrap_ci_matches_the_exact_bootstrap_distribution_and_is_reproducible():
    original, quantized = _runs(both_right=150, right_to_wrong=10, wrong_to_right=2, both_wrong=38)
    out = paired_tasks.compare(original, quantized, 0.95)
    low, high = _exact_bootstrap_quantiles({-1: 10, 0: 188, 1: 2}, 0.95)
    step = 1 / 200  # the distribution's atoms: 9,999 draws land within one of the exact ends
    assert abs(out["change_low"] - low) <= step + 1e-12
    assert abs(out["change_high"] - high) <= step + 1e-12
    assert out["change_low"] < out["change"] == -0.04 < out["change_high"]
    assert paired_tasks.compare(original, quantized, 0.95) == out  # seeded


def test_identical_runs_have_no_flips_a_point_ci_and_p_one():
    original, _ = _runs(both_right=7, right_to_wrong=0, wrong_to_right=0, both_wrong=3)
    out = paired_tasks.compare(original, dict(original), 0.95)
    assert (out["right_to_wrong"], out["wrong_to_right"], out["mcnemar_p"]) == (0, 0, 1.0)
    assert out["change_low"] == out["change_high"] == 0.0


def test_a_non_binary_metric_gets_the_paired_difference_ci_and_no_flips():
    original = {"0": 0.5, "1": 0.25, "2": 0.75, "3": 1.0}
    quantized = {"0": 0.25, "1": 0.25, "2": 0.5, "3": 0.75}
    out = paired_tasks.compare(original, quantized, 0.9)
    assert not out["binary"] and out["mcnemar_p"] is None and out["right_to_wrong"] is None
    assert out["change"] == pytest.approx(-0.1875)
    # differences −.25, 0, −.25, −.25: every resample's mean lies in [−.25, 0]
    assert -0.25 <= out["change_low"] <= out["change"] <= out["change_high"] <= 0.0


def test_runs_over_different_items_do_not_pair():
    with pytest.raises(ValueError, match="different items"):
        paired_tasks.compare({"0": 1.0, "1": 0.0}, {"0": 1.0, "2": 0.0}, 0.95)


def _paired(change, low, high, n=200):
    return {"items": n, "change": change, "change_low": low, "change_high": high,
            "confidence": 0.95}  # fmt: skip


def test_non_inferiority_three_outcomes_and_the_items_that_would_decide():
    assert paired_tasks.non_inferiority(_paired(0.0, -0.01, 0.01), 0.02)[0] == "pass"
    assert paired_tasks.non_inferiority(_paired(-0.1, -0.14, -0.06), 0.02)[0] == "fail"
    outcome, line = paired_tasks.non_inferiority(_paired(-0.02, -0.04, 0.0), 0.03)
    # half-width 0.02, distance of the change from the margin 0.01: 200 × (0.02 / 0.01)² = 800
    assert outcome == "inconclusive"
    assert line.startswith("inconclusive: 200 items cannot show a 3-point margin at 95%; ~800 ")


def test_the_max_drop_gate_is_inconclusive_not_failed_and_not_a_cache_input():
    settings = EvalSettings(tasks=[TaskSpec(task="t", recovery_threshold=None, max_drop=0.03)])
    rows = [{"task": "t", "recovery": 0.98, "paired": _paired(-0.02, -0.04, 0.0)}]
    report = check_gates(settings, {"ppl_ratio": 1, "kl_mean": 0, "same_top_pct": 100}, rows)
    (check,) = report.checks
    assert not report.passed and report.inconclusive_only()
    assert (check.gate, check.limit, check.value, check.outcome) == (
        "t max_drop", -0.03, -0.04, "inconclusive",
    )  # fmt: skip
    hf = {"backend": "hf"}
    assert tasks.key({"m": 1}, [TaskSpec(task="t", max_drop=0.01, confidence=0.9)], hf) == (
        tasks.key({"m": 1}, [TaskSpec(task="t")], hf)
    )


def test_task_rows_pair_items_and_read_the_floor():
    original, quantized = _runs(both_right=8, right_to_wrong=2, wrong_to_right=0, both_wrong=0)
    scores = {"tasks": {"t": {"value": 1.0, "stderr": 0.0, "samples": 10, "items": original}}}
    q = {"tasks": {"t": {"value": 0.8, "stderr": 0.1, "samples": 10, "items": quantized}}}
    (row,) = tasks.compare([TaskSpec(task="t")], scores, q, scores)
    assert row["paired"]["right_to_wrong"] == 2 and row["paired"]["mcnemar_p"] == 0.5
    assert row["floor"]["right_to_wrong"] == row["floor"]["wrong_to_right"] == 0


def test_a_task_reads_in_words_with_its_floor():
    from pipeline.eval import describe
    from pipeline.eval.results import TaskRow

    original, quantized = _runs(both_right=140, right_to_wrong=6, wrong_to_right=2, both_wrong=52)
    own = dict(original)
    own["0"] = 0.0  # the original's re-run at another batch flipped one item
    row = TaskRow.model_validate(
        tasks.compare(
            [TaskSpec(task="t")],
            {"tasks": {"t": {"value": 0.73, "stderr": 0.03, "samples": 200, "items": original}}},
            {"tasks": {"t": {"value": 0.71, "stderr": 0.03, "samples": 200, "items": quantized}}},
            {"tasks": {"t": {"value": 0.725, "stderr": 0.03, "samples": 200, "items": own}}},
        )[0]
    )
    line = describe.task_line(row)
    # McNemar: 2 × P(X ≤ 2), X ~ Binomial(8, ½) = 2 × (1 + 8 + 28) / 256
    p = 2 * sum(math.comb(8, k) for k in range(3)) / 2**8
    assert line.startswith(f"t (acc): 6 right→wrong, 2 wrong→right of 200 (McNemar p {p:.2g}); ")
    assert "-2.0 points, 95% CI [" in line and line.endswith("8 flips in 200, floor 1")
