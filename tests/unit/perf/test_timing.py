"""Time estimates: measured overheads + the bound of the work (pipeline/perf/timing.py)."""

import pytest

from pipeline.config import recipe
from pipeline.config.recipe import ServeSettings
from pipeline.models import aliases
from pipeline.perf import bound, timing
from pipeline.planning import geometry, gpus

H100 = gpus.SPECS["H100-80GB"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path))


def test_overheads_are_kept_per_stage_newest_first(cache):
    assert timing.observed("serve") is None
    timing.record("serve", {"seconds": 40.0, "model": "a", "step_seconds": {"1": 0.01}})
    timing.record("eval-hf", {"seconds": 12.0, "model": "a", "tasks_seconds": 3.0})
    timing.record("serve", {"seconds": 30.0, "model": "b", "step_seconds": {}})
    assert timing.observed("serve")["model"] == "b"
    assert timing.observed("eval-hf")["seconds"] == 12.0


def test_estimate_is_overhead_plus_work_or_the_bound_alone():
    assert timing.estimate(5.0, None, "x")[0] == 5.0
    assert "≥ the bound" in timing.estimate(5.0, None, "x")[1]
    seconds, how = timing.estimate(5.0, {"seconds": 20.0, "model": "tiny"}, "x")
    assert seconds == 25.0 and "measured overheads (20 s, tiny)" in how


def test_eval_work_is_the_prefill_bound_of_every_window_of_both_sides():
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    fp8 = recipe.load("fp8")
    # 8 windows of 512 a side: 2 forwards of 4 windows each
    one = timing.eval_work(geometry.of(config), fp8, 8 * 512, 512, H100, sides=1)
    step = bound.prefill(
        geometry.of(config), bound.footprint(geometry.of(config), fp8), H100, 4, 512, "auto", 1
    )
    assert one == pytest.approx(2 * step.seconds)
    both = timing.eval_work(geometry.of(config), fp8, 8 * 512, 512, H100)
    original = bound.prefill(
        geometry.of(config), bound.footprint(geometry.of(config)), H100, 4, 512, "auto", 1
    )
    assert both == pytest.approx(one + 2 * original.seconds)


def test_serve_work_counts_every_round_of_every_repeat():
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    s = ServeSettings(input_len=32, output_len=16, concurrency=[1, 4], num_prompts=8, repeats=2)
    levels = timing.serve_work(geometry.of(config), recipe.load("fp8"), s, H100)
    one = levels[1]
    step = one["step_seconds"]
    assert step["quantized"] < step["original"]  # 8-bit weights read faster
    fp = bound.footprint(geometry.of(config))
    prefill = bound.prefill(geometry.of(config), fp, H100, 1, 32, "auto", 1).seconds
    original = 2 * 8 * (prefill + 16 * step["original"])  # 2 repeats × 8 rounds of 1
    assert one["benchmark_seconds"] > original
    assert levels[4]["benchmark_seconds"] < one["benchmark_seconds"]  # 2 rounds of 4
