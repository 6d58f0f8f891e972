"""Paired task figures and noise floors in words, one way for every reader (the eval's table,
the model card, the nightly report). No torch, numpy or scipy: results are read as stored."""

from pipeline.eval.floor import times
from pipeline.eval.gates import GateCheck
from pipeline.eval.results import EvalResults, PairedTask, SplitDrift, TaskRow


def drift_floor(split: SplitDrift) -> str | None:
    """'mean KL 1.10e-04: 40× the floor (2.7e-06 at batch 2); same top-1 99.20% (floor 100.00%)'"""
    f = split.floor
    if f is None:
        return None
    return (
        f"mean KL {split.kl_mean:.2e}: {times(split.kl_mean, f.kl_mean)} ({f.kl_mean:.1e} at "
        f"batch {f.batch_size}); same top-1 {split.same_top_pct:.2f}% (floor "
        f"{f.same_top_pct:.2f}%); ppl ratio {split.ppl_ratio:.4f} (floor {f.ppl_ratio:.4f})"
    )


def flips(p: PairedTask) -> str:
    """'5 right→wrong, 1 wrong→right of 200 (McNemar p 0.22)'; non-binary: the items only."""
    if p.right_to_wrong is None:
        return f"{p.items} items"
    return (
        f"{p.right_to_wrong} right→wrong, {p.wrong_to_right} wrong→right of {p.items} "
        f"(McNemar p {p.mcnemar_p:.2g})"
    )


def change(p: PairedTask) -> str:
    """'−2.0 points, 95% CI [−3.5, −0.5]' (the metric × 100)."""
    return (
        f"{100 * p.change:+.1f} points, {100 * p.confidence:g}% CI "
        f"[{100 * p.change_low:+.1f}, {100 * p.change_high:+.1f}]"
    )


def against_floor(row: TaskRow) -> str | None:
    """'6 flips in 200, floor 0' / '2 flips in 200, as many as the floor'."""
    p, f = row.paired, row.floor
    if p is None or f is None or p.flips is None or f.flips is None:
        return None
    if p.flips == f.flips:
        return f"{p.flips} flips in {p.items}, as many as the floor"
    return f"{p.flips} flips in {p.items}, floor {f.flips}"


def task_line(row: TaskRow) -> str:
    """One task, paired: flips, McNemar, the change's CI, the floor."""
    if row.paired is None:
        return f"{row.task}: no per-item results (scored before items were kept)"
    parts = [flips(row.paired), change(row.paired), against_floor(row)]
    return f"{row.task} ({row.metric}): " + "; ".join(p for p in parts if p)


def gate_mark(c: GateCheck) -> str:
    return {"pass": "pass", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}.get(
        c.outcome or "", "pass" if c.passed else "FAIL"
    )


def lines(results: EvalResults) -> list[str]:
    """What the eval adds under its drift table: the floor, each task paired, gate verdicts
    that have words of their own (non-inferiority)."""
    out = []
    if (floor := drift_floor(results.heldout)) is not None:
        out.append(f"noise floor (heldout): {floor}")
    out += [f"paired: {task_line(t)}" for t in results.tasks]
    out += [f"gate {c.gate}: {c.message}" for c in results.gates.checks if c.message]
    return out
