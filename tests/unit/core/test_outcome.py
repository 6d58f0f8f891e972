"""A flow's overall status from its stages: an error first, then a failed gate, then a stage
this host could not run; each with its exit code."""

from pipeline.core.errors import EXIT_CODES
from pipeline.core.outcome import Outcome, StageOutcome, overall


def _s(stage, status, reason=None, message=None):
    return StageOutcome(stage=stage, status=status, reason=reason, message=message)


def test_priority_of_failures():
    ok = _s("quantize", "done")
    gate = _s("eval", "gate_failed", "gate_failed", "eval gate failed: x")
    host = _s("serve", "unsupported", "unsupported", "no kernel")
    crash = _s("serve", "failed", "server_error", "died")
    assert overall([ok, _s("eval", "cached")]) == ("ok", None)
    assert overall([ok, host]) == ("unsupported", "no kernel")
    assert overall([ok, gate, host]) == ("gate_failed", "eval gate failed: x")
    assert overall([ok, gate, crash]) == ("server_error", "died")
    assert overall([_s("eval", "failed")]) == ("internal_error", None)


def test_exit_codes_follow_the_status():
    codes = {s: Outcome.of("run", s).exit_code for s in EXIT_CODES}
    assert codes["ok"] == 0 and codes["user_error"] == 2 and codes["gate_failed"] == 3
    assert codes["unsupported"] == 4 and codes["transient"] == 75  # EX_TEMPFAIL: try again
    assert codes["internal_error"] == codes["server_error"] == codes["hub_error"] == 1
