"""A stage's work in a forked process of its own (pipeline/core/own_process.py), and when the
flow chooses it: where GPUs are seen (the stand-in nvidia-smi) and a later stage starts vLLM."""

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.chain import flow
from pipeline.core import own_process, stopping
from pipeline.core.errors import NotOnThisHost, Terminated
from tests.unit.core.test_devices import standin


def _pid_and(x: int) -> tuple[int, int]:
    return os.getpid(), x * 2


def _refuse() -> None:
    raise NotOnThisHost("no kernel for that here")


def _die() -> None:
    os._exit(9)


def test_the_work_runs_in_another_process_and_its_result_comes_back():
    pid, value = own_process.call(_pid_and, 21)
    assert value == 42 and pid != os.getpid()


def test_its_error_comes_back_with_its_type_and_a_dead_child_is_said():
    with pytest.raises(NotOnThisHost, match="no kernel for that here"):
        own_process.call(_refuse)
    with pytest.raises(RuntimeError, match=r"ended without a result \(exit 9\)"):
        own_process.call(_die)


def _wait_to_be_stopped(folder: Path) -> None:
    (folder / "started").touch()
    try:
        time.sleep(60)
    except KeyboardInterrupt as e:
        (folder / "stopped").write_text(type(e).__name__)
        raise


def test_sigterm_to_the_command_stops_its_stages_process_like_ctrl_c(tmp_path):
    """SIGTERM reaches the command's process alone (Slurm, Kubernetes, `timeout`), not its
    forked stage as a terminal's Ctrl-C does: the stop is handed on, the child records it, and
    the command ends as interrupted."""

    def send_sigterm() -> None:
        while not (tmp_path / "started").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_sigterm, daemon=True).start()
    with stopping.on_sigterm(), pytest.raises(Terminated):
        own_process.call(_wait_to_be_stopped, tmp_path)
    assert (tmp_path / "stopped").read_text() == "Terminated"


def test_sigterm_during_the_fork_still_reaches_the_child(tmp_path, monkeypatch):
    """The stop lands as the child is being forked (a busy host's fork of a large process takes
    long enough): it is handed on once the child exists, never left working unstopped."""
    start, children = multiprocessing.context.ForkProcess.start, []

    def start_then_sigterm(self) -> None:
        start(self)
        children.append(self.pid)
        os.kill(os.getpid(), signal.SIGTERM)  # within start(): before call() could hand it on

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", start_then_sigterm)
    began = time.monotonic()
    try:
        with stopping.on_sigterm(), pytest.raises(Terminated):
            own_process.call(_wait_to_be_stopped, tmp_path)
        # the child is gone, stopped by the stop (before its work began, or in it), not by the
        # 30 s kill of a child that never got it: its work sleeps 60 s
        with pytest.raises(ProcessLookupError):
            os.kill(children[0], 0)
        assert time.monotonic() - began < 25
        if (tmp_path / "started").exists():
            assert (tmp_path / "stopped").read_text() == "Terminated"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(children[0], signal.SIGKILL)


def test_a_child_torch_marks_as_a_bad_fork_hands_the_work_back(monkeypatch, capsys):
    """torch's fork handler marks the child when the parent had initialised CUDA (a plain
    is_available(), which leaves is_initialized() False): no CPU build can initialise CUDA, so
    the mark is set by hand here; on a GPU the bundle's check runs the real negative control."""
    import torch

    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    pid, value = own_process.call(_pid_and, 21)
    assert value == 42 and pid == os.getpid()
    assert "CUDA was initialised in this process before the fork" in capsys.readouterr().err


def test_serve_and_eval_on_vllm_start_an_engine():
    """Each stage says so itself (the chain asks, never names a stage)."""
    from pipeline.eval.stage import EvalStage
    from pipeline.external.stage import ImportStage
    from pipeline.publish.stage import PublishStage
    from pipeline.quantize.stage import QuantizeStage
    from pipeline.serve.stage import ServeStage

    def says(stage, **fields) -> bool:  # a class constant, or a property of the stage's fields
        member = stage.starts_engine
        return member.fget(SimpleNamespace(**fields)) if isinstance(member, property) else member

    assert says(ServeStage) and not says(PublishStage)
    assert not says(QuantizeStage) and not says(ImportStage)
    assert [says(EvalStage, backend=b) for b in ("vllm", "hf")] == [True, False]


def test_stages_before_a_vllm_engine_get_their_own_process_on_gpu_hosts(monkeypatch):
    monkeypatch.delenv("PIPELINE_STAGE_PROCESS", raising=False)
    standin(monkeypatch, "h100x1")
    assert flow.in_own_process(False, [False, True]) and flow.in_own_process(False, [True])
    assert flow.in_own_process(False, [True])  # eval on vllm
    assert not flow.in_own_process(False, [False])  # nothing after it needs the GPU free
    assert not flow.in_own_process(True, [])
    standin(monkeypatch, "h100x1", "")  # no GPU visible: one process, as on CPU hosts
    assert not flow.in_own_process(False, [True])
    monkeypatch.setenv("PIPELINE_STAGE_PROCESS", "own")
    assert flow.in_own_process(False, [])
