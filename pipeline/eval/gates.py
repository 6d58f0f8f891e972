"""Pass/fail of an evaluation against the recipe's gates as they are now (thresholds are not
inputs of a cached result: editing one needs no re-evaluation)."""

from pydantic import BaseModel

from pipeline.config.recipe import EvalSettings


class GateCheck(BaseModel):
    gate: str
    limit: float
    value: float
    passed: bool


class GateReport(BaseModel):
    passed: bool
    checks: list[GateCheck]

    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if not c.passed]


def check_gates(settings: EvalSettings, heldout: dict, task_rows: list[dict] = ()) -> GateReport:
    g = settings.gates
    at_least, at_most = (lambda v, lim: v >= lim), (lambda v, lim: v <= lim)
    checks = [
        ("max_ppl_ratio", g.max_ppl_ratio, heldout["ppl_ratio"], at_most),
        ("max_mean_kl", g.max_mean_kl, heldout["kl_mean"], at_most),
        ("min_same_top_pct", g.min_same_top_pct, heldout["same_top_pct"], at_least),
    ]
    thresholds = {t.task: t.recovery_threshold for t in settings.tasks}
    for row in task_rows:
        limit = thresholds.get(row["task"])
        value = row["recovery"] if row["recovery"] is not None else 0.0
        checks.append((f"{row['task']} recovery", limit, value, at_least))
    results = [
        {"gate": name, "limit": limit, "value": value, "passed": ok(value, limit)}
        for name, limit, value, ok in checks
        if limit is not None
    ]
    return GateReport(passed=all(r["passed"] for r in results), checks=results)
