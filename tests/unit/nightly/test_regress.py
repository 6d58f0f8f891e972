"""Regression rules, branch by branch: quality by standard errors, throughput ratios by a noise
band, memory by growth; a gated figure that turns NaN or ±inf by itself ("not finite"); better
values, unknown metrics and figures that were not finite before never flag."""

import pytest

from pipeline.nightly.matrix import Thresholds
from pipeline.nightly.regress import compare
from pipeline.nightly.store import Metric

T = Thresholds(quality_sigma=3.0, throughput_band=0.25, memory_band=0.01)


def _m(name, value, se=None, better="lower", kind="quality"):
    return {name: Metric(name, value, se, better, kind)}


def test_quality_worse_by_more_than_3_se_regresses():
    (f,) = compare(_m("kl_mean", 1.5e-4, 1e-5), _m("kl_mean", 1.0e-4, 1e-5), T)
    assert f.metric == "kl_mean" and "> 3 SE" in f.limit and "0.0001 → 0.00015" in f.describe()


def test_quality_within_3_se_is_noise():
    assert compare(_m("kl_mean", 1.3e-4, 1e-5), _m("kl_mean", 1.0e-4, 1e-5), T) == []


def test_higher_is_better_metrics_regress_downwards():
    now = _m("same_top_pct", 95.0, 0.1, better="higher")
    assert compare(now, _m("same_top_pct", 99.0, 0.1, better="higher"), T)
    assert (
        compare(_m("same_top_pct", 99.5, 0.1, "higher"), _m("same_top_pct", 99.0, 0.1, "higher"), T)
        == []
    )


def test_a_quality_change_without_standard_errors_is_flagged():
    (f,) = compare(_m("x.recovery", 0.9), _m("x.recovery", 0.8, better="lower"), T)
    assert f.limit == "changed, no standard error"


@pytest.mark.parametrize("bad_se", [float("nan"), float("inf")])
def test_a_non_finite_standard_error_counts_as_none_never_hiding_a_change(bad_se):
    """hypot(nan, x) is NaN and every comparison with it false: such an SE is no SE."""
    (f,) = compare(_m("kl_mean", 1.5e-4, bad_se), _m("kl_mean", 1.0e-4, 1e-5), T)
    assert f.limit == "> 3 SE (1e-05)"
    (f,) = compare(_m("kl_mean", 1.5e-4, bad_se), _m("kl_mean", 1.0e-4, bad_se), T)
    assert f.limit == "changed, no standard error"
    tp = dict(better="higher", kind="throughput")
    (f,) = compare(_m("c4.output_tok_s_ratio", 0.5, bad_se, **tp),
                   _m("c4.output_tok_s_ratio", 1.0, 0.02, **tp), T)  # fmt: skip
    assert "noise band" in f.limit


def test_throughput_ratios_use_the_noise_band_and_absolute_tok_s_is_not_gated():
    before = {
        **_m("c4.output_tok_s_ratio", 1.0, better="higher", kind="throughput"),
        **_m("c4.output_tok_s", 100.0, better="higher", kind="throughput"),
    }
    slightly = {
        **_m("c4.output_tok_s_ratio", 0.8, better="higher", kind="throughput"),
        **_m("c4.output_tok_s", 10.0, better="higher", kind="throughput"),
    }
    assert compare(slightly, before, T) == []  # 20% < 25% band; absolute tok/s follows the host
    much = _m("c4.output_tok_s_ratio", 0.7, better="higher", kind="throughput")
    (f,) = compare(much, before, T)
    assert f.metric == "c4.output_tok_s_ratio" and "noise band" in f.limit


def test_a_throughput_drop_within_its_runs_own_noise_is_not_a_regression():
    """Paired ratios carry the standard error of their repeats: a 30% drop (beyond the band)
    between runs whose own repeats scatter by more is noise, not a finding."""
    before = _m("c4.output_tok_s_ratio", 1.0, 0.02, better="higher", kind="throughput")
    noisy = _m("c4.output_tok_s_ratio", 0.7, 0.15, better="higher", kind="throughput")
    assert compare(noisy, before, T) == []  # 0.30 < 3 × hypot(0.15, 0.02) = 0.45
    steady = _m("c4.output_tok_s_ratio", 0.7, 0.03, better="higher", kind="throughput")
    (f,) = compare(steady, before, T)
    assert "noise band and 3 SE" in f.limit


def test_checkpoint_growth_beyond_the_band():
    before = _m("checkpoint_bytes", 1000, kind="memory")
    assert compare(_m("checkpoint_bytes", 1005, kind="memory"), before, T) == []
    (f,) = compare(_m("checkpoint_bytes", 1020, kind="memory"), before, T)
    assert "growth" in f.limit
    assert (
        compare(_m("ratio_to_bf16", 0.9, kind="memory"), _m("ratio_to_bf16", 0.5, kind="memory"), T)
        == []
    )


def test_metrics_missing_before_are_not_compared():
    assert compare(_m("kl_mean", 1.0, 0.1), {}, T) == []


NAN, INF = float("nan"), float("inf")


def _ratio(value, se=None):
    return _m("c4.output_tok_s_ratio", value, se, better="higher", kind="throughput")


@pytest.mark.parametrize("lost", [NAN, INF, -INF])
def test_a_figure_no_longer_finite_is_a_regression_of_its_own(lost):
    """kl_mean 0.01 → NaN, a tok/s ratio 1.5 → NaN: NaN is worse by nothing (every comparison
    with it is false), so once nothing flagged it; ±inf was judged by its sign."""
    (f,) = compare(_m("kl_mean", lost, 1e-3), _m("kl_mean", 0.01, 1e-3), T)
    assert f.limit == "not finite"
    assert f.describe() == f"kl_mean 0.01 → {lost:.4g} (not finite)"
    (f,) = compare(_ratio(lost, 0.1), _ratio(1.5, 0.1), T)
    assert (f.metric, f.limit) == ("c4.output_tok_s_ratio", "not finite")
    (f,) = compare(_m("checkpoint_bytes", lost, kind="memory"), _m("checkpoint_bytes", 1000,
                                                                   kind="memory"), T)  # fmt: skip
    assert f.limit == "not finite"


@pytest.mark.parametrize("was", [NAN, INF, -INF])
@pytest.mark.parametrize("now", [0.01, NAN, INF, -INF])
def test_a_figure_that_was_not_finite_is_never_a_regression(was, now):
    """Finite again is a recovery; still not finite is the old finding, not a new one."""
    assert compare(_m("kl_mean", now, 1e-3), _m("kl_mean", was, 1e-3), T) == []
    assert compare(_ratio(now), _ratio(was), T) == []


def test_ungated_figures_that_turn_non_finite_are_not_flagged():
    """Absolute tokens/s follow the host and are not gated: NaN there is no regression."""
    now = _m("c4.output_tok_s", NAN, better="higher", kind="throughput")
    assert compare(now, _m("c4.output_tok_s", 100.0, better="higher", kind="throughput"), T) == []
    now = _m("ratio_to_bf16", INF, kind="memory")
    assert compare(now, _m("ratio_to_bf16", 0.5, kind="memory"), T) == []
