"""`make compare MODEL=tiny-llama RECIPES=gptq CALIB=python-docs,python-docs-chat`: one recipe
calibrated on each set (SAMPLES, SEEDS: more cells), each quantized and evaluated through the
flow `run` uses (every stage cached), all scored on the same held-out text (EVAL_DATA, default
the recipe's), then one table, a verdict for each pair of sets and one plot:

    runs/<model>/compare-calib-<recipe>-<set>+<set>…/compare.json   cells and verdicts
    runs/<model>/compare-calib-<recipe>-<set>+<set>…/compare.png    mean KL per set (95% CI)
    runs/<model>/compare-calib-<recipe>-<set>+<set>…/recipes/       each cell's recipe

A verdict pairs two cells window by window on the same tokens (pipeline/eval/paired.py): the
difference in mean KL with its 95% Student-t CI over the windows. "better" where the CI excludes
0 and the difference is beyond the noise floor (the original scored against itself: what the
measurement cannot tell from zero), "indistinguishable" otherwise, saying which of the two held
it back. Task flips and answer drift are each cell's against the original, as `make eval` says
them.
"""

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.config.strict import display
from pipeline.core.files import sha256_json, write_json_atomic
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.eval import paired
from pipeline.eval.floor import times
from pipeline.eval.results import load as eval_results
from pipeline.eval.stage import TOKENS
from pipeline.quantize.request import QuantizeRequest
from pipeline.quantize.stage import QuantizeStage
from pipeline.search import calibration_sets, compare_recipes
from pipeline.search.calibration_sets import CalibrationSet

CONFIDENCE = 0.95


@dataclass
class Cell:
    name: str  # its recipe and run folder
    row: compare_recipes.Row
    set: str = ""  # the calibration set with its sample count, the seed left out
    seed: int | None = None  # drift against the original, as `make compare` of recipes
    calibration: dict | None = None  # the manifest's record (quantize/calibration_record.py)
    quantize_seconds: float | None = None
    floor_kl: float | None = None
    tasks: list[dict] = field(default_factory=list)  # each task's paired change and flips
    answers: dict | None = None  # length ratio (CI) and identical answers vs the original


def prepare(ask: QuantizeRequest, sets: list[CalibrationSet], eval_data: str | None, runs: Runs):
    """Each cell's recipe and stage: every mistake before any work; nothing written."""
    folder = _folder(runs, ask, sets)
    stages = []
    for s in sets:
        rf = calibration_sets.derived(folder / "recipes", ask.recipe, s, eval_data)
        # None: the recipe's own count, as QuantizeRequest's default
        stages.append(
            QuantizeStage.prepare(QuantizeRequest(ask.ref, rf, num_samples=s.samples), runs)
        )
    return folder, stages


def compare(folder: Path, stages: list[QuantizeStage], backend: str | None) -> Outcome:
    cells = []
    for q in stages:
        calibration_sets.write(q.recipe)  # beside the comparison: each cell re-runs alone
    for i, q in enumerate(stages, 1):
        print(f"compare {q.ref.name}: {q.recipe.name} ({i}/{len(stages)})", flush=True)
        cells.append(_cell(q, compare_recipes.one(q, backend, serve=False)))
    pairs = _verdicts(cells)
    sets = _set_verdicts(cells)
    model = stages[0].ref.name
    write_json_atomic(folder / "compare.json", {
        "model": model, "confidence": CONFIDENCE,
        "cells": [asdict(c) for c in cells], "pairs": pairs, "sets": sets,
    })  # fmt: skip
    plotted = _plot(cells, model, folder / "compare.png")
    print()
    print(render(cells, pairs, model, sets))
    paths = {"table": str(folder / "compare.json")}
    if plotted:
        paths["plot"] = str(folder / "compare.png")
    for key, path in paths.items():
        print(f"  {key:<9} {display(Path(path))}")
    return compare_recipes.outcome_of([c.row for c in cells], model, paths)


def _folder(runs: Runs, ask: QuantizeRequest, sets: list[CalibrationSet]) -> Path:
    names = "+".join(calibration_sets.name(ask.recipe, s).split(".", 1)[1] for s in sets)
    if len(names) > 80:
        names = f"{len(sets)}-sets-{sha256_json(names)[:8]}"
    return runs.folder(ask.ref.name, f"compare-calib-{ask.recipe.name}-{names}")


def _cell(q: QuantizeStage, row: compare_recipes.Row) -> Cell:
    cal = q.recipe.spec.calibration
    drawn = f"{cal.dataset}{' (chat)' if cal.chat_template else ''}, {cal.num_samples} asked"
    cell = Cell(q.recipe.name, row, set=drawn, seed=cal.seed)
    entry = q.rundir.stage("quantize")
    if entry is not None and entry.status == "done":
        cell.calibration = entry.metrics.get("calibration")
        cell.quantize_seconds = entry.metrics.get("quantize_seconds")
    if row.status == "failed":
        return cell
    results = eval_results(Path(row.results["eval"]))
    h = results.heldout
    cell.floor_kl = h.floor.kl_mean if h.floor else None
    for t in results.tasks:
        if t.paired:
            p = t.paired
            cell.tasks.append({"task": t.task, "change": p.change, "low": p.change_low,
                               "high": p.change_high, "right_to_wrong": p.right_to_wrong,
                               "wrong_to_right": p.wrong_to_right})  # fmt: skip
    if g := results.generation:
        cell.answers = {"length_ratio": g.length_ratio, "low": g.length_ratio_low,
                        "high": g.length_ratio_high, "identical": g.identical,
                        "prompts": g.prompts}  # fmt: skip
    return cell


def _verdicts(cells: list[Cell]) -> list[dict]:
    """Each pair of evaluated cells, the first against the second."""
    done = [c for c in cells if c.row.status != "failed"]
    pairs: list[dict] = []
    for a, b in itertools.combinations(done, 2):
        ra, rb = (eval_results(Path(c.row.results["eval"])) for c in (a, b))
        windows = ra.heldout.windows
        if rb.heldout.windows != windows or ra.heldout.reference.key != rb.heldout.reference.key:
            pairs.append({"first": a.name, "second": b.name, "verdict": "not comparable",
                          "why": "scored on different held-out tokens"})  # fmt: skip
            continue
        diff = paired.kl_by_window(_tokens(a), _tokens(b), windows, CONFIDENCE)  # a − b
        floor = max(c.floor_kl or 0.0 for c in (a, b))
        said = {"verdict": paired.verdict(diff, floor), "why": _why(diff, floor)}
        pairs.append({"first": a.name, "second": b.name, **diff, "floor_kl": floor, **said})
    return pairs


def _set_verdicts(cells: list[Cell]) -> list[dict]:
    """Each pair of calibration sets drawn under several seeds: the difference of their mean KL
    against the spread between draws of one set (paired.across_draws). "better" only where
    that CI excludes 0 too: a window-paired verdict between two single draws says which draw
    drifts less, not which data."""
    groups: dict[str, list[float]] = {}  # each set's mean KL, one per seed
    for c in cells:
        if c.row.status != "failed" and c.row.kl_mean is not None:
            groups.setdefault(c.set, []).append(c.row.kl_mean)
    if not any(len(g) > 1 for g in groups.values()):
        return []
    found = []
    for (a, ca), (b, cb) in itertools.combinations(groups.items(), 2):
        diff = paired.across_draws(ca, cb, CONFIDENCE)
        if diff["low"] is None:
            said = "undecided: one seed of a set (give SEEDS=… of two or more)"
        elif diff["low"] <= 0 <= diff["high"]:
            said = "indistinguishable: the seeds of one set differ as much"
        else:
            said = "better" if diff["high"] < 0 else "worse"
        found.append({"first": a, "second": b, **diff, "verdict": said.split(":")[0],
                      "why": said})  # fmt: skip
    return found


def _tokens(c: Cell) -> Path:
    return Path(c.row.results["eval"]).parent / TOKENS


def _why(diff: dict, floor: float) -> str:
    ci = f"{diff['low']:+.2e} … {diff['high']:+.2e}"
    if diff["low"] <= 0 <= diff["high"]:
        return f"the {CONFIDENCE:.0%} CI {ci} holds 0"
    if abs(diff["diff"]) <= floor:
        return f"|Δ| {abs(diff['diff']):.2e} is within the noise floor {floor:.2e}"
    return f"{CONFIDENCE:.0%} CI {ci}, {times(abs(diff['diff']), floor)}"


def render(cells: list[Cell], pairs: list[dict], model: str, sets: Sequence[dict] = ()) -> str:
    head = (f"{'calibration set':<28} {'samples':>7} {'tokens sha256':>13} "
            f"{compare_recipes.drift_head()} {'KL×floor':>8} "
            f"{'task flips (CI)':>20} {'answers: length, same':>24} {'quantize':>9}")  # fmt: skip
    lines = [f"compare calibration sets of {cells[0].name.split('.')[0]} on {model} "
             "(heldout split; ± one standard error)", head]  # fmt: skip
    for c in cells:
        r = c.row
        if r.status == "failed":
            lines.append(f"{c.name:<28} failed: {r.message}")
            continue
        cal = c.calibration or {}
        sha = (cal.get("token_ids_sha256") or "-")[:12]
        lines.append(
            f"{c.name:<28} {cal.get('samples', '-'):>7} {sha:>13} "
            f"{compare_recipes.drift_cells(r)} {_ratio(r.kl_mean, c.floor_kl):>8} "
            f"{_flips(c.tasks):>20} {_answers(c.answers):>24} "
            f"{_seconds(c.quantize_seconds):>9}"
        )  # fmt: skip
    if pairs:
        lines.append(f"pairs (mean KL, paired by window; {CONFIDENCE:.0%} CI of first − second)")
    for p in pairs:
        if p["verdict"] == "not comparable":
            lines.append(f"  {p['first']} vs {p['second']}: not comparable ({p['why']})")
            continue
        lines.append(f"  {p['first']} vs {p['second']}: {p['verdict']} (Δ {p['diff']:+.2e}; "
                     f"{p['why']})")  # fmt: skip
    if sets:
        lines.append(f"sets over their seeds (mean KL; {CONFIDENCE:.0%} CI of first − second "
                     "from the spread between seeds of one set)")  # fmt: skip
    for p in sets:
        ci = "" if p["low"] is None else f", CI {p['low']:+.2e} … {p['high']:+.2e}"
        lines.append(f"  {p['first']} vs {p['second']}: {p['why']} (Δ {p['diff']:+.2e}"
                     f"{ci}; seeds {p['draws'][0]} and {p['draws'][1]})")  # fmt: skip
    if any(c.tasks for c in cells):
        lines.append("task flips: right→wrong/wrong→right against the original, with the "
                     "paired change's CI; answers: length ratio to the original's (CI), and how "
                     "many are identical")  # fmt: skip
    return "\n".join(lines)


def _ratio(value, floor) -> str:
    if value is None or not floor:
        return "-"
    return f"{value / floor:,.0f}" if value / floor >= 100 else f"{value / floor:.3g}"


def _flips(tasks: list[dict]) -> str:
    """right→wrong/wrong→right and the paired change's CI, per task (binary tasks; else the
    change and its CI)."""
    if not tasks:
        return "-"
    parts = []
    for t in tasks:
        ci = f"[{t['low']:+.2f},{t['high']:+.2f}]"
        if t["right_to_wrong"] is None:
            parts.append(f"{t['change']:+.3f} {ci}")
        else:
            parts.append(f"{t['right_to_wrong']}/{t['wrong_to_right']} {ci}")
    return " ".join(parts)


def _answers(a: dict | None) -> str:
    if not a or a["length_ratio"] is None:
        return "-"
    ci = f"[{a['low']:.2f},{a['high']:.2f}]"
    return f"×{a['length_ratio']:.2f} {ci}, {a['identical']}/{a['prompts']}"


def _seconds(s) -> str:
    return "-" if s is None else f"{s:.0f} s"


def _plot(cells: list[Cell], model: str, path: Path) -> bool:
    """Mean KL per cell with its 95% CI (1.96 SE) and the noise floor: one panel."""
    done = [c for c in cells if c.row.status != "failed" and c.row.kl_mean is not None]
    if not done:
        return False
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(done)))
    for y, c in enumerate(done):
        kl = c.row.kl_mean
        assert kl is not None  # done holds the cells with a mean KL
        err = None if c.row.kl_mean_se is None else 1.96 * c.row.kl_mean_se
        ax.errorbar([kl], [y], xerr=err, fmt="o", capsize=4, color=f"C{y}")
    floors = [c.floor_kl for c in done if c.floor_kl]
    if floors:
        ax.axvline(max(floors), color="grey", linestyle="--", label="noise floor (mean KL)")
        ax.legend(fontsize=8)
    ax.set_yticks(range(len(done)), [c.name for c in done])
    ax.set_xlabel("mean KL vs original on held-out text (nats/token, 95% CI)")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(f"{model}: calibration sets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
