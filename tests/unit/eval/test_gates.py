"""Gates: each limit checked on the held-out split and task recovery, as the recipe says now."""

from pipeline.config.recipe import EvalSettings, Gates, TaskSpec
from pipeline.eval.gates import check_gates

HELDOUT = {"ppl_ratio": 1.2, "kl_mean": 0.01, "same_top_pct": 90.0}


def test_gates_name_what_failed():
    gates = Gates(max_ppl_ratio=1.1, max_mean_kl=0.05, min_same_top_pct=95)
    result = check_gates(EvalSettings(gates=gates), HELDOUT)
    assert not result.passed
    assert [c.gate for c in result.failed()] == ["max_ppl_ratio", "min_same_top_pct"]
    assert [c.gate for c in result.checks if c.passed] == ["max_mean_kl"]


def test_unset_gates_are_not_checked():
    result = check_gates(EvalSettings(), HELDOUT)
    assert result.passed and result.checks == []


def test_limits_are_inclusive():
    gates = Gates(max_ppl_ratio=1.2, max_mean_kl=0.01, min_same_top_pct=90.0)
    assert check_gates(EvalSettings(gates=gates), HELDOUT).passed


def test_task_recovery_gate_and_a_missing_recovery_counts_as_zero():
    settings = EvalSettings(
        tasks=[
            TaskSpec(task="a", recovery_threshold=0.95),
            TaskSpec(task="b", recovery_threshold=None),
        ]
    )
    rows = [{"task": "a", "recovery": 0.96}, {"task": "b", "recovery": 0.1}]
    result = check_gates(settings, HELDOUT, rows)
    assert result.passed and [c.gate for c in result.checks] == ["a recovery"]  # b: record only
    result = check_gates(settings, HELDOUT, [{"task": "a", "recovery": None}])
    assert not result.passed and result.checks[0].value == 0.0
