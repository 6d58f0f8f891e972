"""Pass/fail of an evaluation against the recipe's gates as they are now (thresholds are not
inputs of a cached result: editing one needs no re-evaluation).

A task's `max_drop` gate (non-inferiority, pipeline/eval/paired_tasks.py) has a third outcome:
inconclusive, when the paired CI straddles the margin; its check is not passed, and its message
says how many items would decide it. So has the generation's `max_length_ratio`
(pipeline/eval/generation.py), against the length ratio's CI.
"""

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from pipeline.config.recipe import EvalSettings
from pipeline.eval import generation as generation_drift
from pipeline.eval import paired_tasks


class GateCheck(BaseModel):
    gate: str
    limit: float
    value: float
    passed: bool
    outcome: Literal["pass", "fail", "inconclusive"] | None = None
    message: str | None = None

    @property
    def inconclusive(self) -> bool:
        return self.outcome == "inconclusive"


class GateReport(BaseModel):
    passed: bool
    checks: list[GateCheck]

    def failed(self) -> list[GateCheck]:
        """The checks not passed, inconclusive ones included."""
        return [c for c in self.checks if not c.passed]

    def inconclusive_only(self) -> bool:
        """Nothing failed outright, but some check could not decide."""
        failed = self.failed()
        return bool(failed) and all(c.inconclusive for c in failed)


def check_gates(
    settings: EvalSettings,
    heldout: dict,
    task_rows: Sequence[dict] = (),
    generation: dict | None = None,
) -> GateReport:
    g = settings.gates
    at_least, at_most = (lambda v, lim: v >= lim), (lambda v, lim: v <= lim)
    checks = [
        ("max_ppl_ratio", g.max_ppl_ratio, heldout["ppl_ratio"], at_most),
        ("max_mean_kl", g.max_mean_kl, heldout["kl_mean"], at_most),
        ("min_same_top_pct", g.min_same_top_pct, heldout["same_top_pct"], at_least),
    ]
    specs = {t.task: t for t in settings.tasks}
    for row in task_rows:
        limit = specs[row["task"]].recovery_threshold if row["task"] in specs else None
        value = row["recovery"] if row["recovery"] is not None else 0.0
        checks.append((f"{row['task']} recovery", limit, value, at_least))
    results = [
        GateCheck(gate=name, limit=limit, value=value, passed=ok(value, limit))
        for name, limit, value, ok in checks
        if limit is not None
    ]
    for row in task_rows:
        spec = specs.get(row["task"])
        if spec is not None and spec.max_drop is not None:
            results.append(_non_inferiority(row, spec.max_drop))
    if (limit := settings.generation.max_length_ratio) is not None:
        results.append(_length(generation, limit))
    return GateReport(passed=all(r.passed for r in results), checks=results)


def _non_inferiority(row: dict, max_drop: float) -> GateCheck:
    """limit −max_drop, value the paired CI's lower end of quantized − original."""
    gate, paired = f"{row['task']} max_drop", row.get("paired")
    if paired is None:
        message = "inconclusive: no per-item results to pair (re-run the eval)"
        return GateCheck(gate=gate, limit=-max_drop, value=0.0, passed=False,
                         outcome="inconclusive", message=message)  # fmt: skip
    outcome, message = paired_tasks.non_inferiority(paired, max_drop)
    return GateCheck(gate=gate, limit=-max_drop, value=paired["change_low"],
                     passed=outcome == "pass", outcome=outcome, message=message)  # fmt: skip


def _length(generation: dict | None, limit: float) -> GateCheck:
    """limit the ratio, value the paired CI's upper end of quantized / original length."""
    gate = "generation max_length_ratio"
    if generation is None:
        message = "inconclusive: no answers to compare (generation off, or an older eval)"
        return GateCheck(gate=gate, limit=limit, value=0.0, passed=False,
                         outcome="inconclusive", message=message)  # fmt: skip
    outcome, message = generation_drift.length_gate(generation, limit)
    value = generation["length_ratio_high"] or 0.0
    return GateCheck(gate=gate, limit=limit, value=value, passed=outcome == "pass",
                     outcome=outcome, message=message)  # fmt: skip
