"""Paired task figures and noise floors in words, one way for every reader (the eval's table,
the model card, the nightly report). No torch, numpy or scipy: results are read as stored."""

from pipeline.eval.floor import times
from pipeline.eval.gates import GateCheck
from pipeline.eval.results import (
    EvalResults,
    GenerationComparison,
    GenerationDrift,
    PairedTask,
    SplitDrift,
    TaskRow,
)


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


def generation(g: GenerationDrift) -> str:
    """'32 prompts, ≤256 tokens: length ×1.04, 95% CI [0.98, 1.10] (floor ×1.00); ends with EOS
    81% → 78%; truncated 19% → 22%; 12 identical (floor 32), the rest part at token 14 (median)'"""
    return "; ".join(
        p
        for p in (
            f"{g.prompts} prompts, ≤{g.max_new_tokens} tokens: {_length(g)} "
            f"({g.mean_tokens_original:.0f} → {g.mean_tokens_quantized:.0f} tokens/answer; "
            f"floor {_ratio(g.floor)})",
            f"ends with EOS {_pct(g.eos_rate_original)} → {_pct(g.eos_rate_quantized)}",
            f"truncated {_pct(g.truncated_rate_original)} → {_pct(g.truncated_rate_quantized)}",
            _parting(g),
            _think(g),
        )
        if p
    )


def _length(g: GenerationComparison) -> str:
    if g.length_ratio is None:
        return "length ratio n/a (the original's answers are empty)"
    return (
        f"length ×{g.length_ratio:.3f}, {100 * g.confidence:g}% CI "
        f"[{g.length_ratio_low:.3f}, {g.length_ratio_high:.3f}]"
    )


def _ratio(g: GenerationComparison) -> str:
    return "n/a" if g.length_ratio is None else f"×{g.length_ratio:.3f}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _parting(g: GenerationDrift) -> str:
    said = f"{g.identical} of {g.prompts} identical (floor {g.floor.identical})"
    if g.first_divergence_median is None:
        return said
    median, first = g.first_divergence_median, g.first_divergence_min
    return f"{said}, the rest part at token {median:g} (median; first {first})"


def _think(g: GenerationDrift) -> str | None:
    if g.think_end_rate_original is None or g.think_end_rate_quantized is None:  # set together
        return None
    return f"</think> {_pct(g.think_end_rate_original)} → {_pct(g.think_end_rate_quantized)}"


def gate_mark(c: GateCheck) -> str:
    return {"pass": "pass", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}.get(
        c.outcome or "", "pass" if c.passed else "FAIL"
    )


def lines(results: EvalResults) -> list[str]:
    """What the eval adds under its drift table: the floor, each task paired, the generation
    drift, gate verdicts that have words of their own (non-inferiority, answer length)."""
    out = []
    if (floor := drift_floor(results.heldout)) is not None:
        out.append(f"noise floor (heldout): {floor}")
    out += [f"paired: {task_line(t)}" for t in results.tasks]
    if results.generation is not None:
        out.append(f"generation: {generation(results.generation)}")
    out += [f"gate {c.gate}: {c.message}" for c in results.gates.checks if c.message]
    return out
