"""A nightly cell's verdict comes from the outcome's status classes (pipeline/core/outcome.py),
never from the wording of a message: rewording one changes no verdict."""

import pytest

from pipeline.chain import flow
from pipeline.core.errors import NotOnThisHost
from pipeline.core.outcome import Outcome, StageOutcome, overall
from pipeline.core.runs import Runs
from pipeline.core.stage_plan import Options
from pipeline.engines.vllm import serving_env
from pipeline.nightly import cell, matrix
from pipeline.quantize.request import QuantizeRequest
from pipeline.quantize.stage import QuantizeStage
from tests.conftest import as_cpu_host

AVX2_HOST = {"w4a16": False, "fp8_kv_cache": False}


def _outcome(*stages: StageOutcome) -> Outcome:
    status, message = overall(list(stages))
    return Outcome.of(
        "run", status, message, model="tiny-llama", recipe="gptq", stages=list(stages)
    )


def _classes(verdict: dict) -> tuple:
    """What a verdict decides: the cell's status and each stage's class (not its words)."""
    return verdict["status"], {k: v.split(":")[0] for k, v in verdict["stages"].items()}


def _skipped_serve(monkeypatch, reword: str | None, tmp_path) -> StageOutcome:
    """The real flow preparing serve for a W4A16 recipe on a CPU host without the kernel."""
    as_cpu_host(monkeypatch, tmp_path / "serve-cpu")
    monkeypatch.setattr(serving_env, "available", lambda: True)
    monkeypatch.setattr(serving_env, "capabilities", lambda: AVX2_HOST)
    if reword:

        def require_scheme(scheme, doing, hint=""):
            if not serving_env.runs_scheme(scheme):
                raise NotOnThisHost(reword)

        monkeypatch.setattr(serving_env, "require_scheme", require_scheme)
    q = QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", "gptq"), Runs(tmp_path / "runs"))
    prepared = flow.prepare("run", q, ("serve",), Options(skip_unsupported=True))
    (skipped,) = prepared.skipped
    return skipped


@pytest.mark.parametrize("reword", ["Ce GPU-là n'existe pas ici.", "kernels: none, sorry"])
def test_rewording_messages_changes_no_verdict(monkeypatch, reword, tmp_path):
    done = StageOutcome(stage="quantize", status="cached")

    def verdicts(serve: StageOutcome, gate_message: str, error_message: str):
        gate = StageOutcome(
            stage="eval", status="gate_failed", reason="gate_failed", message=gate_message
        )
        crash = StageOutcome(
            stage="eval", status="failed", reason="server_error", message=error_message
        )
        return [
            _classes(cell.verdict(_outcome(done, serve))),
            _classes(cell.verdict(_outcome(done, gate, serve))),
            _classes(cell.verdict(_outcome(done, crash))),
        ]

    original = verdicts(
        _skipped_serve(monkeypatch, None, tmp_path), "eval gate failed: max_mean_kl", "vLLM died"
    )
    monkeypatch.undo()
    reworded = verdicts(_skipped_serve(monkeypatch, reword, tmp_path), reword, reword)
    assert (
        original
        == reworded
        == [
            ("ok", {"quantize": "done", "serve": "skipped"}),
            ("gate_failed", {"quantize": "done", "eval": "gate_failed", "serve": "skipped"}),
            ("failed", {"quantize": "done", "eval": "failed"}),
        ]
    )


def test_the_real_refusal_is_classed_unsupported(monkeypatch, tmp_path):
    skipped = _skipped_serve(monkeypatch, None, tmp_path)
    assert skipped.status == "unsupported" and skipped.reason == "unsupported"
    assert "W4A16" in skipped.message


def test_without_skip_unsupported_the_refusal_ends_the_command(monkeypatch, tmp_path):
    as_cpu_host(monkeypatch, tmp_path / "serve-cpu")
    monkeypatch.setattr(serving_env, "available", lambda: True)
    monkeypatch.setattr(serving_env, "capabilities", lambda: AVX2_HOST)
    q = QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", "gptq"), Runs(tmp_path / "runs"))
    with pytest.raises(NotOnThisHost):
        flow.prepare("serve", q, ("serve",))


def test_a_command_that_printed_no_outcome_is_a_failed_cell():
    v = cell.verdict(None, "some output\nKilled\n")
    assert v["status"] == "failed" and v["error"] == "crashed: Killed" and v["stages"] == {}


def test_a_refusal_before_any_stage_is_a_failed_cell():
    v = cell.verdict(Outcome.of("run", "user_error", "unknown recipe 'x'"))
    assert v["status"] == "failed" and v["error"].startswith("user_error")


def test_the_cell_hands_its_run_a_typed_request_that_the_flags_would_have_given(tmp_path):
    """`pipeline run --request -` reads the cell's ChainSpec as JSON: the ChainRequest it makes
    is the one the same cell spelled as flags makes."""
    from pipeline.chain.request import ChainSpec
    from pipeline.cli import requests
    from pipeline.cli.main import _parser
    from pipeline.config.flags import to_argv

    runs = Runs(tmp_path)
    m, _ = matrix.load(None)
    fp8 = matrix.cells(m, runs)[0]
    cmd, spec = cell.command(fp8)
    assert cmd[1:] == ["-m", "pipeline", "run", "--request", "-", "--json"]
    read = requests.from_spec(ChainSpec.model_validate_json(spec.model_dump_json()), as_json=True)
    assert read.stages == ("eval", "serve") and read.options.skip_unsupported
    assert read.options.backend == "hf" and read.options.serve_overrides["enforce_eager"]
    flags = ["run", "--model", fp8.model, "--recipe", fp8.recipe_arg, "--stages", "eval,serve",
             "--skip-unsupported", "--backend", "hf", *to_argv(dict(fp8.serve))]  # fmt: skip
    given = requests.ChainRequest.from_args(_parser().parse_args([*flags, "--json"]), read.stages)
    assert given == read


def test_recovery_se():
    assert cell.recovery_se(0.5, 0.5, 0.01, 0.01) == pytest.approx(1.0 * (2 * 0.02**2) ** 0.5)
    assert cell.recovery_se(0.0, 0.5, 0.01, 0.01) is None
    assert cell.recovery_se(0.5, 0.5, None, 0.01) is None


def test_a_cell_s_log_stays_in_the_log_folder_whatever_its_model_is_called():
    """A model given as a folder (an absolute path) or a hub id: one file name, not a path."""
    from types import SimpleNamespace

    found = [
        cell.log_name(SimpleNamespace(model=m, name=n))
        for m, n in (("/data/zoo/llama31", "slow1"), ("org/model", "fp8"), ("tiny-llama", "gptq"))
    ]
    assert found == ["data--zoo--llama31--slow1.log", "org--model--fp8.log", "tiny-llama--gptq.log"]


CELL_THAT_RECORDS_ITS_STOP = """
import pathlib, signal, sys, time
folder = pathlib.Path(sys.argv[1])
def stopped(signum, frame):
    (folder / "stopped").write_text(signal.Signals(signum).name)
    sys.exit(143)
signal.signal(signal.SIGTERM, stopped)
(folder / "started").touch()
time.sleep(60)
"""


def test_a_stopped_driver_stops_its_running_cell_as_a_command_is_stopped(monkeypatch, tmp_path):
    """SIGTERM (or Ctrl-C) to the nightly driver: its cell, in a session of its own, gets
    SIGTERM and its grace to record the stop and end its servers, instead of the SIGKILL its
    parent's death sends it (procs.die_with_parent). The cell here stands in for `pipeline run`:
    what that does with SIGTERM is the eval stage's SIGTERM test."""
    import os
    import signal
    import sys
    import threading
    import time

    from pipeline.core import stopping
    from pipeline.core.errors import Terminated

    script = [sys.executable, "-c", CELL_THAT_RECORDS_ITS_STOP, str(tmp_path)]
    monkeypatch.setattr(cell, "command", lambda c: (script, cell.ChainSpec(model=c.model)))

    def stop_the_driver() -> None:
        while not (tmp_path / "started").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_the_driver, daemon=True).start()
    one = matrix.cells(matrix.load(None)[0], Runs(tmp_path / "runs"))[0]
    with stopping.on_sigterm(), pytest.raises(Terminated):
        cell._run(one, Runs(tmp_path / "runs"), tmp_path / "cell.log", timeout_s=120)
    assert (tmp_path / "stopped").read_text() == "SIGTERM" and not cell._RUNNING
