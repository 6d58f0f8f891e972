"""Regression rules, branch by branch: quality by standard errors, throughput ratios by a noise
band, memory by growth; better values and unknown metrics never flag."""

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
