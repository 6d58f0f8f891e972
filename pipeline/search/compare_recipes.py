"""`make compare MODEL=tiny-llama RECIPES=fp8,w4a16-rtn,gptq`: each recipe quantized and
evaluated through the one flow of `run` (every stage cached as usual), then one table and one
plot of drift against the artifact's size and, where served results exist, throughput:

    runs/<model>/compare-<recipe>+<recipe>…/compare.json   the rows below, for a program
    runs/<model>/compare-<recipe>+<recipe>…/compare.png    drift vs size (and vs throughput)

Each drift figure comes with the spread the eval results carry (heldout split): mean KL ± its
SE, perplexity ratio ± its paired SE, same top token % ± its SE. Task recovery (quantized /
original score) has no SE of its own in the results: it is computed from the two scores' SEs
by the delta method, r·√((se_q/q)² + (se_o/o)²), as if the two were independent (the same
questions make them correlated, so this overstates it). Throughput: the serve stage's output
tokens/s at its highest concurrency, quantized / original (median of the paired ratios ± their
SE, or their range where there is no SE). With --serve each recipe is served too (cached);
without it, a serve result already cached for this artifact and the recipe's settings is read.

A recipe whose stage fails is a row saying why; the others still run. Failed gates are in the
table, not in the exit code: comparing is how one finds the recipe that passes.
"""

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.chain import flow
from pipeline.chain import plan as chain_plan  # the stages: not loaded before a dry run
from pipeline.config.engine_name import ENGINE
from pipeline.config.strict import display
from pipeline.core.errors import PipelineError, UserError
from pipeline.core.files import sha256_json, write_json_atomic
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.core.stage_plan import Options
from pipeline.eval.metrics import DRIFT, DriftMetric, plus_minus
from pipeline.eval.results import load as eval_results
from pipeline.quantize.request import QuantizeRequest
from pipeline.quantize.stage import QuantizeStage
from pipeline.search import orderings
from pipeline.serve.results import load as serve_results
from pipeline.serve.stage import ServeStage

MIB = 2**20
DEFAULT_RECIPES = ("fp8", "w4a16-rtn", "gptq")
PLOTTED = (  # (key, axis label, the original's value): the drift figures, then the tasks'
    *((m.key, m.label, m.at_original) for m in DRIFT),
    ("recovery", "task recovery (quantized / original)", 1.0),
)


# a row's gate verdict in words (failed rows say why instead)
GATES = {"ok": "pass", "gate_failed": "FAIL", "gate_inconclusive": "inconclusive"}


@dataclass
class Row:
    recipe: str
    status: str  # ok | gate_failed | gate_inconclusive (too few items to decide) | failed
    message: str | None = None
    reason: str | None = None  # a failed row's error class (its exit code)
    size_bytes: int | None = None  # the artifact's tensors
    ratio_to_bf16: float | None = None
    backend: str | None = None
    drift: dict[str, float | None] = field(default_factory=dict)  # eval/metrics.py's, and SEs
    recovery: float | None = None  # the mean over the recipe's tasks
    recovery_se: float | None = None  # delta method (see the module's docstring)
    tasks: dict[str, dict] = field(default_factory=dict)  # task → {recovery, recovery_se}
    served: dict | None = None  # concurrency, output_tok_s, ratio, ratio_se, spread, paired
    served_note: str | None = None  # why there is no throughput
    results: dict[str, str] = field(default_factory=dict)  # stage → results.json

    @property
    def kl_mean(self) -> float | None:  # what the expected orderings compare
        return self.drift.get("kl_mean")

    @property
    def kl_mean_se(self) -> float | None:
        return self.drift.get("kl_mean_se")

    def figure(self, key: str) -> float | None:
        """A drift figure (or its SE) by its key, or the tasks' recovery."""
        return getattr(self, key) if key.startswith("recovery") else self.drift.get(key)


def parse_recipes(text: str | None) -> list[str]:
    names = [n.strip() for n in (text or ",".join(DEFAULT_RECIPES)).split(",") if n.strip()]
    if not names:
        raise UserError("--recipes: name at least one recipe (e.g. fp8,w4a16-rtn,gptq)")
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise UserError(f"--recipes: {twice!r} is named twice")
    return names


def prepare(asks: list[QuantizeRequest], runs: Runs) -> list[QuantizeStage]:
    """Every recipe checked before any of them runs: a typo fails in one line, nothing done."""
    return [QuantizeStage.prepare(ask, runs) for ask in asks]


def plan(stages: list[QuantizeStage], backend: str | None, serve: bool, as_json: bool) -> None:
    """--dry-run: each recipe's chain plan; exit 4 where this host cannot do one of them."""
    import json

    chain = ("eval", "serve") if serve else ("eval",)
    plans = [chain_plan.build(q, chain, Options(backend=backend)) for q in stages]
    if as_json:
        print(json.dumps([p.record() for p in plans], indent=2))
    else:
        print("\n\n".join(chain_plan.render(p) for p in plans))
    chain_plan.refused([f"{p.recipe}: {why}" for p in plans for why in p.refusals])


def compare(
    stages: list[QuantizeStage],
    backend: str | None = None,
    serve: bool = False,
    out: Path | None = None,
) -> Outcome:
    """Quantize, evaluate (and with serve, serve) each recipe; print the table, write the plot."""
    rows = []
    for i, q in enumerate(stages, 1):
        print(f"compare {q.ref.name}: {q.recipe.name} ({i}/{len(stages)})", flush=True)
        rows.append(one(q, backend, serve))
    folder = out or default_folder(stages)
    folder.mkdir(parents=True, exist_ok=True)
    model = stages[0].ref.name
    write_json_atomic(folder / "compare.json", {"model": model, "rows": [asdict(r) for r in rows]})
    plotted = write_plot(rows, model, folder / "compare.png")
    print()
    print(render(rows, model, {q.recipe.name: kind(q) for q in stages}))
    print(f"  table     {display(folder / 'compare.json')}")
    print(f"  plot      {display(folder / 'compare.png')}" if plotted else "  plot      none")
    paths = {"table": str(folder / "compare.json")}
    if plotted:
        paths["plot"] = str(folder / "compare.png")
    return outcome_of(rows, model, paths)


def outcome_of(rows: list["Row"], model: str, paths: dict) -> Outcome:
    """A failed recipe first (its own error class), then a gate that failed or could not decide
    (exit 3, as `make eval` of that recipe exits), else ok."""
    failed = [r for r in rows if r.status == "failed"]
    gated = [r for r in rows if r.status in ("gate_failed", "gate_inconclusive")]
    if failed:
        first = failed[0]
        assert first.reason is not None  # one() names every failed row's error class
        return Outcome.of("compare", first.reason, f"{first.recipe}: {first.message}",
                          model=model, paths=paths)  # fmt: skip
    if gated:
        first = gated[0]
        return Outcome.of("compare", first.status, f"{first.recipe}: {first.message}",
                          model=model, paths=paths)  # fmt: skip
    return Outcome.of("compare", "ok", model=model, paths=paths)


def default_folder(stages: list[QuantizeStage]) -> Path:
    names = "+".join(q.recipe.name for q in stages)
    if len(names) > 80:  # many recipes: a short stable name
        names = f"{len(stages)}-recipes-{sha256_json(names)[:8]}"
    first = stages[0].rundir  # beside the run folders, as a run folder of its own
    return first.runs.folder(first.model_name, f"compare-{names}")


def one(q: QuantizeStage, backend: str | None, serve: bool) -> Row:
    chain = ("eval", "serve") if serve else ("eval",)
    try:
        options = Options(backend=backend, skip_unsupported=True)
        prepared = flow.prepare("compare", q, chain, options)
    except PipelineError as e:
        print(f"  {q.recipe.name}: not run: {e}", flush=True)
        return Row(q.recipe.name, "failed", str(e), e.reason)
    outcome = flow.run(prepared, {}, set())
    by = {s.stage: s for s in outcome.stages}
    done = ", ".join(
        f"{s.stage} {s.status}" + (f" ({s.message})" if s.status == "failed" else "")
        for s in outcome.stages
    )
    print(f"  {q.recipe.name}: {done}", flush=True)
    failed = next((s for s in outcome.stages if s.status == "failed"), None)
    if failed or "eval" not in by:
        gone = failed or by.get("eval")
        why = f"{gone.stage}: {gone.message}" if gone else "eval: not run"
        return Row(q.recipe.name, "failed", why, (gone and gone.reason) or "internal_error")
    row = _row(q, by)
    if "serve" not in by:
        row.served, row.served_note = _cached_serve(q)
    elif by["serve"].status == "unsupported":
        row.served_note = f"not served on this host: {by['serve'].message}"
    return row


def kind(q: QuantizeStage) -> orderings.Kind:
    """What the expected orderings compare a recipe by."""
    scheme = q.recipe.scheme()
    return orderings.Kind(
        weight_bits=scheme.weight_bits if scheme else None,
        scheme=scheme.name if scheme else None,
        calibrated=q.calibration.num_samples > 0,
    )


def _row(q: QuantizeStage, by: dict) -> Row:
    m = by["quantize"].metrics or {}
    evaluated = by["eval"]
    results = eval_results(Path(evaluated.paths["results"]))
    h = results.heldout
    gated = evaluated.status == "gate_failed"  # its reason: failed, or could not decide
    row = Row(
        q.recipe.name,
        evaluated.reason if gated else "ok",
        evaluated.message if gated else None,
        size_bytes=m.get("tensor_bytes"),
        ratio_to_bf16=m.get("ratio_to_bf16"),
        backend=results.backend,
        drift=drift_figures(h),
        results={"eval": evaluated.paths["results"]},
    )
    for t in results.tasks:
        row.tasks[t.task] = {"recovery": t.recovery, "recovery_se": recovery_se(t)}
    row.recovery, row.recovery_se = mean_with_se(list(row.tasks.values()))
    if "serve" in by and by["serve"].status in ("done", "cached"):
        row.results["serve"] = by["serve"].paths["results"]
        row.served = throughput(Path(row.results["serve"]))
    return row


def recovery_se(t) -> float | None:
    """SE of quantized / original from the two scores' SEs (delta method, independent)."""
    if t.recovery is None or t.original_stderr is None or t.quantized_stderr is None:
        return None
    if not t.original or not t.quantized:
        return None
    rel = (t.quantized_stderr / t.quantized) ** 2 + (t.original_stderr / t.original) ** 2
    return abs(t.recovery) * math.sqrt(rel)


def mean_with_se(tasks: list[dict]) -> tuple[float | None, float | None]:
    """The tasks' mean recovery and its SE (√Σse² / n); None where a task has none."""
    values = [t["recovery"] for t in tasks if t["recovery"] is not None]
    if not values:
        return None, None
    ses = [t["recovery_se"] for t in tasks]
    se = None if None in ses else math.sqrt(sum(s * s for s in ses)) / len(ses)
    return sum(values) / len(values), se


def _cached_serve(q: QuantizeStage) -> tuple[dict | None, str | None]:
    """A serve result already cached for this artifact with the recipe's own serve settings."""

    try:
        stage = ServeStage.prepare(q)
    except PipelineError as e:
        return None, f"not served on this host: {e}"
    hit = q.rundir.cached("serve", sha256_json(stage.inputs()))
    if not hit:
        how = f"make serve MODEL={q.ref.name} RECIPE={q.recipe.name}, or compare --serve"
        return None, f"no serve result with the recipe's settings yet ({how})"
    return throughput(q.rundir.path / hit.outputs["results"]), None


def throughput(path: Path) -> dict | None:
    """Output tokens/s at the highest concurrency served: quantized, and / original."""

    results = serve_results(path)
    if not results.comparison.levels:
        return None
    top = max(results.comparison.levels, key=lambda lv: lv.concurrency)
    pair = top.output_tok_s
    return {
        "concurrency": top.concurrency,
        "output_tok_s": pair.quantized,
        "original_tok_s": pair.original,
        "ratio": pair.ratio,
        "ratio_se": pair.ratio_se,
        "spread": list(pair.spread) if pair.spread else None,
        "paired": results.comparison.paired,
        "results": str(path),
    }


def render(rows: list[Row], model: str, kinds: dict | None = None) -> str:
    tasks = sorted({t for r in rows for t in r.tasks})
    head = (
        f"{'recipe':<14} {'size MiB':>9} {'×bf16':>6} {drift_head()} {'recovery ± SE':>15} "
        f"{'out tok/s (×orig)':>24}  gates"
    )
    lines = [f"compare {model} (heldout split; ± one standard error)", head]
    for r in rows:
        if r.status == "failed":
            lines.append(f"{r.recipe:<14} failed: {r.message}")
            continue
        gates = GATES[r.status]
        lines.append(
            f"{r.recipe:<14} {_f(r.size_bytes and r.size_bytes / MIB, '.2f'):>9} "
            f"{_f(r.ratio_to_bf16, '.3f'):>6} "
            f"{drift_cells(r)} "
            f"{plus_minus(r.recovery, r.recovery_se, '.3f', '.3f'):>15} {_served(r):>24}  {gates}"
        )
    notes = [f"  {r.recipe}: {r.served_note}" for r in rows if r.served_note]
    if tasks:
        lines.append(
            f"recovery: mean over {', '.join(tasks)}; its SE by the delta method from the two "
            "scores' SEs (computed)"
        )
    expected = orderings.check(rows, kinds or {})
    if expected:
        lines += ["orderings expected (mean KL, two standard errors either side):", *expected]
    return "\n".join(lines + notes)


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def drift_figures(split) -> dict[str, float | None]:
    """A split's drift figures and their SEs, by eval/metrics.py's keys."""
    return {k: v for m in DRIFT for k, v in ((m.key, m.value(split)), (m.se_key, m.se(split)))}


def drift_head() -> str:
    """The drift figures' columns of a table, in the catalogue's order."""
    return " ".join(f"{m.head:>{_width(m)}}" for m in DRIFT)


def drift_cells(r: "Row") -> str:
    """A row's drift figures, as drift_head heads them."""
    return " ".join(
        f"{plus_minus(r.drift.get(m.key), r.drift.get(m.se_key), m.fmt, m.se_fmt):>{_width(m)}}"
        for m in DRIFT
    )


def _width(m: DriftMetric) -> int:
    return max(len(m.head), len(format(1.0, m.fmt)) + 3 + len(format(0.1, m.se_fmt)))


def _served(r: Row) -> str:
    s = r.served
    if not s or s["output_tok_s"] is None:
        return "-"
    if s["ratio"] is None:
        return f"{s['output_tok_s']:.0f} @{s['concurrency']}"
    spread = f"±{s['ratio_se']:.2f}" if s["ratio_se"] is not None else ""
    return f"{s['output_tok_s']:.0f} @{s['concurrency']} (×{s['ratio']:.2f}{spread})"


def write_plot(rows: list[Row], model: str, path: Path) -> bool:
    """Drift vs size (top row) and, where served, vs throughput (bottom row); the original as a
    star at its bf16 size (KL 0, ratios 1). False when no recipe has results to plot."""
    done = [r for r in rows if r.status != "failed" and r.size_bytes]
    if not done:
        return False
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    served = [r for r in done if r.served and r.served.get("output_tok_s") is not None]
    nrows = 2 if served else 1
    fig, axes = plt.subplots(nrows, len(PLOTTED), figsize=(4.5 * len(PLOTTED), 4.2 * nrows),
                             squeeze=False)  # fmt: skip
    original = next(
        (r.size_bytes / r.ratio_to_bf16 for r in done if r.size_bytes and r.ratio_to_bf16), None
    )
    colors = {r.recipe: f"C{i}" for i, r in enumerate(rows)}  # one colour per recipe throughout
    for col, (key, label, at_original) in enumerate(PLOTTED):
        ax = axes[0][col]
        _points(ax, done, key, lambda r: r.size_bytes / MIB, colors)
        if original:
            ax.plot([original / MIB], [at_original], "k*", markersize=12, label="original (bf16)")
        ax.set_xlabel("artifact size (MiB of tensors)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if served:
            ax = axes[1][col]
            _points(ax, served, key, lambda r: _throughput_of(r)["output_tok_s"], colors)
            origs = [
                t["original_tok_s"] for t in map(_throughput_of, served) if t.get("original_tok_s")
            ]
            if origs:
                ax.plot([origs[0]], [at_original], "k*", markersize=12, label="original")
            top = _throughput_of(served[0])["concurrency"]
            ax.set_xlabel(f"output tokens/s at concurrency {top} ({ENGINE})")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{model}: drift vs size" + (" and throughput" if served else "") + " (± 1 SE)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _throughput_of(r: Row) -> dict:
    """A served row's throughput (write_plot's bottom row holds only those)."""
    if r.served is None:
        raise ValueError(f"{r.recipe} was not served: nothing to plot against throughput")
    return r.served


def _points(ax, rows: list[Row], key: str, x, colors: dict) -> None:
    ax.ticklabel_format(axis="y", useOffset=False)  # 0.9998, not "+1" and -0.0002
    for r in rows:
        y = r.figure(key)
        if y is None:
            continue
        err = r.figure(f"{key}_se")
        ax.errorbar([x(r)], [y], yerr=None if err is None else [err], fmt="o", capsize=4,
                    color=colors[r.recipe], label=r.recipe)  # fmt: skip
        ax.annotate(r.recipe, (x(r), y), textcoords="offset points", xytext=(5, 5), fontsize=8)
