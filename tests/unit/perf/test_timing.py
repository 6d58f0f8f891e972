"""Time estimates: measured overheads + the bound of the work (pipeline/perf/timing.py)."""

import pytest

from pipeline.perf import timing


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


def test_durations_read_in_the_unit_a_person_would_say():
    assert [timing.duration(s) for s in (90, 600, 9000)] == ["90 s", "10 min", "2.5 h"]
