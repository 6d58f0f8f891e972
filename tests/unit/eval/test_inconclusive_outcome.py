"""An eval whose only unmet gate is an undecided non-inferiority margin ends as its own
outcome, `gate_inconclusive`, exit 3, with the line that says how many items would decide it;
one that fails outright stays `gate_failed`."""

from types import SimpleNamespace

from pipeline.chain import flow
from pipeline.core.errors import EXIT_CODES
from pipeline.core.outcome import Outcome, overall
from pipeline.eval.gates import GateCheck, GateReport
from pipeline.eval.stage import EvalStage

UNDECIDED = GateCheck(gate="t max_drop", limit=-0.02, value=-0.03, passed=False,
                      outcome="inconclusive", message="inconclusive: 200 items cannot show a "
                      "2-point margin at 95%; ~450 items would, if the change held")  # fmt: skip
FAILED = GateCheck(gate="max_mean_kl", limit=0.01, value=0.02, passed=False)


def _eval_outcome(monkeypatch, checks):
    entry = SimpleNamespace(fingerprint="f", metrics={}, outputs={})
    monkeypatch.setattr(flow, "execute", lambda stage, force=False: (entry, True))
    report = GateReport(passed=False, checks=checks)
    results = SimpleNamespace(gates=report)
    stage = SimpleNamespace(name="eval", rundir=SimpleNamespace(path=None),
                            load_results=lambda e: results)  # fmt: skip
    stage.verdict = lambda e: EvalStage.verdict(stage, e)  # the eval stage's own, on this one
    return flow._one(stage, None, False)


def test_an_inconclusive_gate_is_its_own_outcome_with_exit_3(monkeypatch):
    stage = _eval_outcome(monkeypatch, [UNDECIDED])
    assert (stage.status, stage.reason) == ("gate_failed", "gate_inconclusive")
    assert stage.message == UNDECIDED.message
    status, message = overall([stage])
    outcome = Outcome.of("eval", status, message)
    assert (outcome.status, outcome.exit_code) == ("gate_inconclusive", 3)
    assert EXIT_CODES["gate_inconclusive"] == EXIT_CODES["gate_failed"] == 3


def test_a_failed_gate_beside_an_undecided_one_is_a_failure(monkeypatch):
    stage = _eval_outcome(monkeypatch, [UNDECIDED, FAILED])
    assert (stage.status, stage.reason) == ("gate_failed", "gate_failed")
    assert stage.message.startswith("eval gate failed: t max_drop (-0.03 vs -0.02), max_mean_kl")
