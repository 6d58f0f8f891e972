"""Generation drift's statistics on constructed answers: lengths, EOS, truncation, where two
answers part, </think>; the length ratio's bootstrap CI checked against the delta method
(computed here, independently of scipy); the length gate's three outcomes."""

import numpy as np
import pytest

from pipeline.config.recipe import EvalSettings, GenerationSettings
from pipeline.eval import generation
from pipeline.eval.gates import check_gates

EOS, THINK = 2, 7
HELDOUT = {"ppl_ratio": 1.0, "kl_mean": 0.0, "same_top_pct": 100.0}


def _answers(lengths, eos=True, start=10):
    return [{"ids": list(range(start, start + n)), "eos": eos} for n in lengths]


def test_answer_stops_at_the_first_eos_and_a_full_one_is_truncated():
    assert generation.answer([5, 6, EOS, 9], {EOS}, 8) == {"ids": [5, 6], "eos": True}
    assert generation.answer([5, 6, 7], {EOS}, 3) == {"ids": [5, 6, 7], "eos": False}
    out = generation.compare(_answers([3]), [generation.answer([5, 6, 7], {EOS}, 3)], 3, None, 0.95)
    assert out["truncated_rate_quantized"] == 1.0 and out["eos_rate_quantized"] == 0.0
    assert out["truncated_rate_original"] == 0.0 and out["eos_rate_original"] == 1.0


def test_identical_answers_are_a_point_ratio_of_one_with_no_divergence():
    a = _answers([4, 9, 16])
    out = generation.compare(a, a, 32, None, 0.95)
    assert (out["length_ratio"], out["length_ratio_low"], out["length_ratio_high"]) == (1, 1, 1)
    assert out["identical"] == 3 and out["first_divergence_median"] is None
    assert out["think_end_rate_original"] is None  # no marker in this tokenizer


def test_every_answer_twice_as_long_is_a_ratio_of_two_with_a_point_ci():
    first, second = _answers([3, 5, 8, 13]), _answers([6, 10, 16, 26])
    out = generation.compare(first, second, 64, None, 0.95)
    # every resample of the pairs has mean(2x) / mean(x) = 2: the interval is that point
    assert out["length_ratio"] == pytest.approx(2)
    assert out["length_ratio_low"] == pytest.approx(2) and out[
        "length_ratio_high"
    ] == pytest.approx(2)
    # the longer answers start as the shorter ones: they part where the shorter one ends
    assert out["identical"] == 0 and out["first_divergence_min"] == 3
    assert out["first_divergence_median"] == 6.5


def test_where_answers_part_and_how_often_they_close_think():
    first = [{"ids": [1, THINK, 3, 4], "eos": True}, {"ids": [1, 2, 3], "eos": True}]
    second = [{"ids": [1, THINK, 3, 9], "eos": True}, {"ids": [5, 2, 3], "eos": False}]
    out = generation.compare(first, second, 8, THINK, 0.95)
    assert out["first_divergence_min"] == 0 and out["first_divergence_median"] == 1.5
    assert out["think_end_rate_original"] == 0.5 and out["think_end_rate_quantized"] == 0.5
    assert out["eos_rate_quantized"] == 0.5 and out["truncated_rate_quantized"] == 0.0


def test_ratio_ci_agrees_with_the_delta_method_and_is_reproducible():
    rng = np.random.default_rng(1)
    o = rng.integers(20, 200, 400)
    q = np.maximum(1, np.round(o * 1.1 + rng.normal(0, 15, 400))).astype(int)
    out = generation.compare(_answers(o), _answers(q), 512, None, 0.95)
    ratio = q.mean() / o.mean()
    # delta method: Var(R) ≈ Var(q − R·o) / (n · mean(o)²)
    se = np.std(q - ratio * o, ddof=1) / (np.sqrt(len(o)) * o.mean())
    assert out["length_ratio"] == pytest.approx(ratio)
    assert out["length_ratio_low"] == pytest.approx(ratio - 1.96 * se, abs=0.15 * 1.96 * se)
    assert out["length_ratio_high"] == pytest.approx(ratio + 1.96 * se, abs=0.15 * 1.96 * se)
    assert generation.compare(_answers(o), _answers(q), 512, None, 0.95) == out  # seeded


def _gate(first_lengths, second_lengths, limit):
    first, second = _answers(first_lengths), _answers(second_lengths)
    drift = generation.compare(first, second, 512, None, 0.95)
    settings = EvalSettings(generation=GenerationSettings(max_length_ratio=limit))
    (check,) = check_gates(settings, HELDOUT, [], drift).checks
    return check


def test_length_gate_passes_fails_or_is_inconclusive_as_the_ci_says():
    rng = np.random.default_rng(0)
    o = rng.integers(50, 150, 200)
    same = _gate(o, o + rng.integers(-2, 3, 200), 1.2)
    assert same.outcome == "pass" and same.passed and "no longer than ×1.2" in same.message
    longer = _gate(o, o * 2, 1.2)
    assert longer.outcome == "fail" and not longer.passed
    few = _gate(
        o[:4], [int(x * 1.2) + s for x, s in zip(o[:4], (-40, 40, -30, 30), strict=True)], 1.2
    )
    assert few.outcome == "inconclusive" and "4 prompts cannot show ×1.2" in few.message


def test_length_gate_without_answers_is_inconclusive_and_off_by_default():
    settings = EvalSettings(generation=GenerationSettings(max_length_ratio=1.1))
    (check,) = check_gates(settings, HELDOUT, [], None).checks
    assert check.outcome == "inconclusive" and not check.passed
    assert check_gates(EvalSettings(), HELDOUT, [], None).checks == []
