"""lm-eval task rows: recovery, and how a failed lm-eval run is reported."""

import pytest

from pipeline.config.recipe import TaskSpec
from pipeline.core.errors import UserError
from pipeline.eval import tasks


def _scores(value, stderr=0.01):
    return {"tasks": {"t": {"value": value, "stderr": stderr, "samples": 200}}}


def test_recovery_is_quantized_over_original():
    spec = [TaskSpec(task="t", recovery_threshold=0.9)]
    (row,) = tasks.compare(spec, _scores(0.8), _scores(0.72))
    assert row["recovery"] == pytest.approx(0.9) and row["recovery_threshold"] == 0.9
    (zero,) = tasks.compare(spec, _scores(0.0), _scores(0.5))
    assert zero["recovery"] is None  # no recovery of a zero score


def test_an_unknown_task_is_a_user_error_and_other_failures_keep_the_log():
    missing = tasks._failure(1, "loading\nerror: lm-eval task not found: nope", "original")
    assert isinstance(missing, UserError) and "local tasks live in" in str(missing)
    crash = tasks._failure(134, "a\nRuntimeError: out of memory\nb", "quantized")
    assert isinstance(crash, RuntimeError) and not isinstance(crash, UserError)
    assert "exit 134" in str(crash) and "out of memory" in str(crash)


def test_the_task_key_ignores_thresholds():
    hf, vllm = {"backend": "hf"}, {"backend": "vllm"}
    a = tasks.key({"m": 1}, [TaskSpec(task="t", recovery_threshold=0.9)], hf)
    b = tasks.key({"m": 1}, [TaskSpec(task="t", recovery_threshold=0.5)], hf)
    assert a == b != tasks.key({"m": 1}, [TaskSpec(task="t")], vllm)


def test_lm_eval_failing_in_this_process_is_one_error_with_its_cause(tmp_path):
    """hf tasks run in the eval's own process: a failure inside lm-eval (here: no model where
    it was pointed) is reported like a failed subprocess, and leaves the process as it was."""
    import logging
    import os

    cwd, handlers = os.getcwd(), logging.getLogger("lm_eval").handlers[:]
    missing = tmp_path / "no-model"
    with pytest.raises(RuntimeError, match="lm-eval failed on the original model:") as err:
        tasks.scores(missing, "hf", [TaskSpec(task="pydoc_word_order")], "original")
    assert not isinstance(err.value, UserError) and str(missing) in str(err.value)
    assert os.getcwd() == cwd and logging.getLogger("lm_eval").handlers == handlers
