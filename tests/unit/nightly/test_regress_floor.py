"""A quality change within the eval's own noise floor is no regression; beyond the floor and the
SE it is. An eval's floors and paired task changes become nightly metrics."""

import pytest

from pipeline.eval.results import DriftFloor, GenerationComparison, GenerationDrift, PairedTask
from pipeline.nightly.matrix import Thresholds
from pipeline.nightly.regress import compare, floor_metrics
from pipeline.nightly.report import floors
from pipeline.nightly.store import Metric

T = Thresholds(quality_sigma=3.0, throughput_band=0.25, memory_band=0.01)


def _kl(value, floor=None):
    now = {"kl_mean": Metric("kl_mean", value, 1e-6, "lower", "quality")}
    if floor is not None:
        now["kl_mean.floor"] = Metric("kl_mean.floor", floor, None, "lower", "floor")
    return now


def test_a_change_within_the_floor_is_not_flagged_beyond_it_is():
    before = _kl(1.0e-4)
    # worse by 2e-5, 20 SE: flagged without a floor, not with a floor of 3e-5
    assert [f.metric for f in compare(_kl(1.2e-4), before, T)] == ["kl_mean"]
    assert compare(_kl(1.2e-4, floor=3e-5), before, T) == []
    assert [f.metric for f in compare(_kl(1.5e-4, floor=3e-5), before, T)] == ["kl_mean"]


class _Results:
    """What floor_metrics reads of an EvalResults."""

    def __init__(self, heldout_floor, rows, generation=None):
        self.heldout = type("H", (), {"floor": heldout_floor})()
        self.tasks = rows
        self.generation = generation


def test_floor_metrics_carry_the_floors_in_the_units_of_the_changes():
    floor = DriftFloor(batch_size=1, tokens=100, kl_mean=2e-6, kl_mean_se=1e-7, kl_p99=1e-5,
                       same_top_pct=99.5, ppl_ratio=1.0002, rms_dp_pct=0.01)  # fmt: skip
    paired = PairedTask(items=200, change=-0.02, change_low=-0.0392, change_high=-0.0008,
                        confidence=0.95, binary=True, right_to_wrong=6, wrong_to_right=2,
                        mcnemar_p=0.29)  # fmt: skip
    own = PairedTask(items=200, change=0.0, change_low=0.0, change_high=0.0, confidence=0.95,
                     binary=True, right_to_wrong=1, wrong_to_right=1, mcnemar_p=1.0)  # fmt: skip
    row = type("Row", (), {"task": "t", "paired": paired, "floor": own})()
    m = {x.name: x for x in floor_metrics(_Results(floor, [row]), Metric)}
    assert m["same_top_pct.floor"].value == pytest.approx(0.5)
    assert m["ppl_ratio.floor"].value == pytest.approx(2e-4)
    assert m["t.change.floor"].value == pytest.approx(2 / 200)  # the floor's 2 flips
    # a 95% CI of half-width 0.0192 is 1.96 SE: SE 0.0098
    assert m["t.change"].se == pytest.approx(0.0192 / 1.959964, rel=1e-5)
    assert m["t.flips"].value == 8
    line = floors([{"model": "tiny", "cell": "fp8", "metrics": m | _kl(1e-4, 2e-6)}])
    assert "mean KL 1.00e-04: 50× the floor" in line
    assert "t -2.0 points (SE 1.0), 8 flips, floor 1.0% of items" in line


def _answers(ratio, low, high, identical, floor_ratio=1.0):
    common = dict(prompts=32, max_new_tokens=256, batch_size=32, mean_tokens_original=100.0,
                  confidence=0.95, eos_rate_original=0.9, eos_rate_quantized=0.8,
                  truncated_rate_original=0.1, truncated_rate_quantized=0.2)  # fmt: skip
    floor = GenerationComparison(**common | {"batch_size": 16}, mean_tokens_quantized=100.0,
                                 length_ratio=floor_ratio, length_ratio_low=floor_ratio,
                                 length_ratio_high=floor_ratio, identical=32)  # fmt: skip
    return GenerationDrift(**common, mean_tokens_quantized=100 * ratio, length_ratio=ratio,
                           length_ratio_low=low, length_ratio_high=high, identical=identical,
                           floor=floor)  # fmt: skip


def test_answer_length_is_a_quality_metric_gated_by_its_ci_and_its_floor():
    def metrics(g):
        return {x.name: x for x in floor_metrics(_Results(None, [], g), Metric)}

    before = metrics(_answers(1.0, 0.98, 1.02, 30))
    longer = metrics(_answers(1.3, 1.2, 1.4, 4))
    # SE from the CI: half-width 0.1 at 95% → 0.051; 0.3 longer is ~5.8 combined SE
    assert longer["answer_length_ratio"].se == pytest.approx(0.1 / 1.959964, rel=1e-5)
    assert longer["answers_parted_pct"].value == pytest.approx(87.5)
    assert [f.metric for f in compare(longer, before, T)] == ["answer_length_ratio"]
    # the same 1.3 against an original that drifts by itself 0.35 at another batch size: noise
    noisy = metrics(_answers(1.3, 1.2, 1.4, 4, floor_ratio=1.35))
    assert noisy["answer_length_ratio.floor"].value == pytest.approx(0.35)
    assert compare(noisy, before, T) == []
    line = floors([{"model": "tiny", "cell": "w4", "metrics": longer}])
    assert "answers ×1.300 long (SE 0.051), floor ±0.000, 88% part from the original's" in line
