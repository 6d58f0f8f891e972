"""Ratios of serving measurements: paired repeats give a median ratio and its range; none from a
latency below the resolution floor; a cached original gives a ratio of medians and no range."""

import pytest

from pipeline.engines.vllm.bench import median
from pipeline.serve.compare import LATENCY_FLOOR_MS, compare
from pipeline.serve.results import Measurement


def _run(repeat, tok_s, ttft, itl=5.0):
    return {
        "repeat": repeat, "sequence": repeat, "completed": 8, "duration_s": 1.0,
        "output_tok_s": tok_s, "total_tok_s": tok_s, "requests_s": 1.0,
        "ttft_median_ms": ttft, "ttft_p99_ms": ttft, "itl_median_ms": itl, "itl_p99_ms": itl,
    }  # fmt: skip


def _side(runs_by_level: dict[int, list[dict]], gpus: int | None = None) -> Measurement:
    levels = [
        {"concurrency": c, "num_prompts": 8, **median(runs), "runs": runs}
        for c, runs in runs_by_level.items()
    ]
    return Measurement(
        model_dir="m", served_name="m", complete=True, max_model_len=512, checkpoint_bytes=1,
        gpus=gpus, levels=levels,
    )  # fmt: skip


def test_paired_ratio_is_the_median_of_the_repeats_ratios_with_their_range():
    # the host slowed down between repeat 0 and 1; each pair saw the same load
    o = _side({4: [_run(0, 100.0, 20.0), _run(1, 50.0, 40.0)]})
    q = _side({4: [_run(0, 200.0, 10.0), _run(1, 110.0, 16.0)]})
    (row,) = compare(o, q, is_paired=True).levels
    assert row.output_tok_s.ratio == pytest.approx((2.0 + 2.2) / 2)
    assert row.output_tok_s.spread == pytest.approx((2.0, 2.2))
    assert row.output_tok_s.ratio_se == pytest.approx(0.1)  # stdev 0.1414 / sqrt(2)
    assert row.ttft_median_ms.spread == pytest.approx((0.4, 0.5))
    # the ratio of the medians would mix the two loads: 155 / 75 = 2.07, not within 2.0–2.2's mean
    assert row.output_tok_s.original == 75.0 and row.output_tok_s.quantized == 155.0


def test_a_latency_below_the_floor_has_no_ratio_and_says_why():
    # seen on CPU: the original's ITL p50 0.007 ms against 29 ms, shown as 4,152×
    o = _side({1: [_run(0, 10.0, 30.0, itl=0.007), _run(1, 10.0, 30.0, itl=3.0)]})
    q = _side({1: [_run(0, 10.0, 30.0, itl=29.06), _run(1, 10.0, 30.0, itl=3.0)]})
    for paired in (True, False):
        (row,) = compare(o, q, is_paired=paired).levels
        assert row.itl_median_ms.ratio is None and row.itl_median_ms.spread is None
        assert f"{LATENCY_FLOOR_MS:g} ms resolution floor" in row.itl_median_ms.note
        assert row.ttft_median_ms.ratio == 1.0 and row.ttft_median_ms.note is None
        assert row.output_tok_s.ratio == 1.0  # throughput has no floor


def test_against_a_cached_original_there_is_one_ratio_of_medians_and_no_range():
    o = _side({4: [_run(0, 100.0, 20.0), _run(1, 50.0, 40.0)]})
    q = _side({4: [_run(0, 200.0, 10.0), _run(1, 110.0, 16.0)]})
    c = compare(o, q, is_paired=False)
    assert not c.paired and c.repeats == 2
    (row,) = c.levels
    assert row.output_tok_s.ratio == 155.0 / 75.0 and row.output_tok_s.spread is None


def test_a_latency_one_side_lacks_has_no_ratio_and_a_missing_level_is_left_out():
    o = _side({1: [_run(0, 10.0, 20.0)], 4: [_run(0, 10.0, 20.0)]})
    q = _side({1: [_run(0, 10.0, 20.0)], 4: [_run(0, 10.0, 20.0)], 16: [_run(0, 9.0, 9.0)]})
    c = compare(o, q, is_paired=True)
    assert [lv.concurrency for lv in c.levels] == [1, 4]
    assert c.levels[0].tpot_median_ms.ratio is None and c.levels[0].tpot_median_ms.note is None
    assert c.levels[0].output_tok_s.ratio_se is None  # one repeat: no standard error


def test_median_sums_counts_and_takes_the_median_of_the_rest():
    runs = [_run(0, 10.0, 20.0), _run(1, 30.0, 10.0), _run(2, 20.0, 30.0)]
    m = median(runs)
    assert m["completed"] == 24 and m["output_tok_s"] == 20.0 and m["ttft_median_ms"] == 20.0
    assert m["tpot_median_ms"] is None  # no run reported it


def test_per_gpu_throughput_counts_the_gpus_each_side_needs():
    # the seed's case: the bf16 original on 2 GPUs (tensor parallel), FP8 on one
    o = _side({4: [_run(0, 300.0, 20.0), _run(1, 280.0, 20.0)]}, gpus=2)
    q = _side({4: [_run(0, 240.0, 20.0), _run(1, 252.0, 20.0)]}, gpus=1)
    (row,) = compare(o, q, is_paired=True).levels
    per_gpu = row.output_tok_s_per_gpu
    assert per_gpu.original == 145.0 and per_gpu.quantized == 246.0
    assert per_gpu.ratio == pytest.approx(2 * row.output_tok_s.ratio)
    assert per_gpu.spread == pytest.approx((2 * 0.8, 2 * 0.9))
    assert per_gpu.ratio_se == pytest.approx(2 * row.output_tok_s.ratio_se)


def test_on_cpu_there_is_no_per_gpu_throughput():
    o = _side({1: [_run(0, 10.0, 30.0)]})
    q = _side({1: [_run(0, 12.0, 30.0)]})
    (row,) = compare(o, q, is_paired=True).levels
    assert row.output_tok_s_per_gpu is None and row.output_tok_s.ratio == pytest.approx(1.2)
