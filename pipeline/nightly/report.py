"""`make report`: reports/<date>/index.html and summary.md with four plots (matplotlib PNGs)
from the results store:

    pareto.png      quality drift (mean KL, ± SE) vs checkpoint size, each cell as last run,
                    and each model's original (KL 0): the lower-left frontier is worth having
    cost.png        $ per 1M output tokens (measured, at the highest concurrency served) vs
                    mean KL, the originals at KL 0: what each recipe saves for what it loses
    throughput.png  output tokens/s vs concurrency per served artifact, its original dashed
    history.png     each gated metric over runs, one line per cell

and, per cell, its drift against the eval's own noise floor and each task's paired change
(flips, against the original's own flips at another batch size).

A figure that is NaN or ±inf (a measurement that broke: regress.py calls it a regression) is
no point matplotlib can place: the plots leave it out, a non-finite SE draws no error bar, and
both are said under the plot and in the report ("not plotted (not finite): …").
"""

import datetime as dt
import html
import math
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from pipeline.core import secrets
from pipeline.core.errors import UserError
from pipeline.core.files import staging_dir
from pipeline.eval.floor import times
from pipeline.eval.metrics import DRIFT
from pipeline.nightly import matrix, night
from pipeline.nightly.store import Metric

MIB = 2**20
STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
    "pre{background:#f6f6f6;padding:1em;overflow-x:auto}"
    "img{max-width:100%;border:1px solid #ddd;margin:1em 0}"
)
HISTORY = (  # (metric, title, log scale): the drift figures (heldout), then throughput
    *((m.key, f"{m.label} (heldout)", m.log_scale) for m in DRIFT),
    ("output_tok_s_ratio", "output tok/s ratio (highest concurrency)", False),
)


def thresholds(matrix_path: str | None, run: dict) -> matrix.Thresholds:
    """The matrix's regression thresholds, as the nightly judged the run by them (its exit
    code); a matrix edited since that run is still read, and said so."""
    m, sha = matrix.load(matrix_path)
    if sha != run.get("matrix_sha"):
        print(f"note: thresholds from {matrix_path or 'evals/nightly.yaml'}, edited since run "
              f"{run['id']} (its matrix differs)", file=sys.stderr)  # fmt: skip
    return m.thresholds


def write(db: str | None, out_root: Path, matrix_path: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    # read here, then closed: the plots take a while
    with night.open_store(db, None, existing=True) as store:
        runs = store.run_ids()
        if not runs:
            raise UserError(
                f"no nightly runs in {secrets.url(store.url)}: run `make nightly` first"
            )
        latest = runs[-1]
        rows = night.summarize(store, latest["id"], thresholds(matrix_path, latest))
        history = store.history()
        cells = _latest_cells(store, runs)
    day = latest["started"][:10]
    with staging_dir(out_root / day) as tmp:
        left = [
            *_pareto(cells, tmp / "pareto.png"),
            *_cost(cells, tmp / "cost.png"),
            *_throughput(cells, tmp / "throughput.png"),
            *_history(history, runs, tmp / "history.png"),
        ]
        table = night.render(rows) + "\n\n" + floors(cells)
        table += f"\n\n{_left_out(left)}" if left else ""
        (tmp / "summary.md").write_text(_markdown(latest, runs, table))
        (tmp / "index.html").write_text(_html(latest, runs, table))
    return out_root / day


def _latest_cells(store, runs: list[dict]) -> list[dict]:
    """Each (model, cell) as its most recent run left it: a run of a few cells (a re-run, a
    one-off experiment) does not hide the others from the plots."""
    latest = {}
    for run in runs:
        for c in store.cells_of(run["id"]):
            metrics = store.metrics_of(run["id"], c["model"], c["cell"])
            latest[(c["model"], c["cell"])] = {**c, "metrics": metrics}
    return [latest[key] for key in sorted(latest)]


def floors(cells: list[dict]) -> str:
    """Per cell: mean KL against its noise floor, each task's paired change and flips, the
    answers' length against its floor."""
    lines = ["noise floors, paired tasks and answers (each cell as last run)"]
    for c in cells:
        m = c["metrics"]
        parts = []
        if "kl_mean" in m and "kl_mean.floor" in m:
            kl, fl = m["kl_mean"].value, m["kl_mean.floor"].value
            parts.append(f"mean KL {kl:.2e}: {times(kl, fl)}")
        for name, metric in sorted(m.items()):
            if name.endswith(".change") and metric.kind == "quality":
                task = name.removesuffix(".change")
                flips, floor = m.get(f"{task}.flips"), m.get(f"{task}.change.floor")
                text = f"{task} {100 * metric.value:+.1f} points (SE {100 * (metric.se or 0):.1f})"
                text += f", {flips.value:g} flips" if flips else ""
                text += f", floor {100 * floor.value:.1f}% of items" if floor else ""
                parts.append(text)
        if "answer_length_ratio" in m:
            length, floor = m["answer_length_ratio"], m.get("answer_length_ratio.floor")
            text = f"answers ×{length.value:.3f} long (SE {length.se or 0:.3f})"
            text += f", floor ±{floor.value:.3f}" if floor else ""
            if parted := m.get("answers_parted_pct"):
                text += f", {parted.value:.0f}% part from the original's"
            parts.append(text)
        if parts:
            lines.append(f"  {c['model']} {c['cell']}: " + "; ".join(parts))
    return "\n".join(lines) if len(lines) > 1 else lines[0] + ": none recorded"


def _pareto(rows: list[dict], path: Path) -> list[str]:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    points, originals = [], {}
    left: list[str] = []
    for r in rows:
        m, where = r["metrics"], f"pareto {r['model']} × {r['cell']}"
        if "original_bytes" in m and _finite(left, where, m["original_bytes"]):
            originals[r["model"]] = m["original_bytes"].value / MIB
        if "kl_mean" in m and "checkpoint_bytes" in m:
            kl = m["kl_mean"]
            if not _finite(left, where, kl, m["checkpoint_bytes"]):
                continue
            x = m["checkpoint_bytes"].value / MIB
            _point(ax, x, kl.value, _bar(left, where, kl), f"{r['model']} × {r['cell']}")
            points.append((x, kl.value))
    for model, x in originals.items():
        _point(ax, x, 0.0, None, f"{model} original", marker="s")
        points.append((x, 0.0))
    frontier = _frontier(points)
    if len(frontier) > 1:
        ax.plot(*zip(*frontier, strict=True), "--", color="grey", lw=1, label="Pareto frontier")
        ax.legend(fontsize=8)
    ax.set_xlabel("checkpoint size (MiB)")
    _kl_axis(ax, [y for _, y in points], "y")
    ax.set_title("Quality drift vs weight memory (lower-left is better)")
    ax.grid(alpha=0.3)
    return _save(fig, path, left)


def _cost(rows: list[dict], path: Path) -> list[str]:
    """$ per 1M output tokens at the highest concurrency each cell served, vs its mean KL."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    kls: list[float] = []
    originals: dict[str, tuple[int, float]] = {}  # model → (concurrency, its $ per 1M tokens)
    left: list[str] = []
    for r in rows:
        m, levels = r["metrics"], _levels(r["metrics"])
        top = max((c for c in levels if "usd_per_million" in levels[c]), default=None)
        if top is None or "kl_mean" not in m:
            continue
        kl, where = m["kl_mean"], f"cost {r['model']} × {r['cell']}"
        usd = m[f"c{top}.usd_per_million"]
        original = m.get(f"c{top}.original_usd_per_million")
        if original is not None and _finite(left, where, original):
            originals.setdefault(r["model"], (top, original.value))
        if not _finite(left, where, kl, usd):
            continue
        _point(ax, kl.value, usd.value, None, f"{r['model']} × {r['cell']} (c={top})",
               xerr=_bar(left, where, kl))  # fmt: skip
        kls.append(kl.value)
    for model, (top, usd) in originals.items():
        _point(ax, 0.0, usd, None, f"{model} original (c={top})", marker="s")
        kls.append(0.0)
    if not kls:
        ax.text(0.5, 0.5, "no served and evaluated cells", ha="center", transform=ax.transAxes)
    _kl_axis(ax, kls, "x")
    ax.set_ylabel("$ per 1M output tokens (measured)")
    ax.set_title("Cost vs quality drift (lower-left is better)")
    ax.grid(alpha=0.3)
    return _save(fig, path, left)


def _point(ax, x, y, yerr, label: str, marker: str = "o", xerr=None) -> None:
    ax.errorbar(x, y, yerr=yerr or 0, xerr=xerr or 0, fmt=marker, capsize=3)
    ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)


def _kl_axis(ax, values: list[float], which: str) -> None:
    """Mean KL on a log scale that still shows the originals' 0 (linear below the smallest
    drift)."""
    label = "mean KL vs original (nats/token)"
    getattr(ax, f"set_{which}label")(label)
    positive = [v for v in values if v > 0]
    if positive:
        getattr(ax, f"set_{which}scale")("symlog", linthresh=min(positive) / 2)


def _frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both size and drift, by size."""
    best, out = float("inf"), []
    for x, y in sorted(points):
        if y < best:
            out.append((x, y))
            best = y
    return out


def _throughput(rows: list[dict], path: Path) -> list[str]:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    left: list[str] = []
    for r in rows:
        levels = _levels(r["metrics"])
        if not levels:
            continue
        where = f"throughput {r['model']} × {r['cell']}"
        cs, tok_s = _line(left, where, levels, "output_tok_s")
        line = ax.plot(cs, tok_s, "o-", label=f"{r['model']} × {r['cell']}")
        color = line[0].get_color()
        cs, tok_s = _line(left, where, levels, "original_tok_s")
        ax.plot(cs, tok_s, "s--", color=color, alpha=0.5, label=f"{r['model']} original")
        drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Throughput vs concurrency (dashed: the original, same host)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no served cells in this run", ha="center", transform=ax.transAxes)
    return _save(fig, path, left)


def _line(left: list[str], where: str, levels: dict, what: str) -> tuple[list, list]:
    """(concurrencies, values) of one throughput line: a level without `what` at 0, as ever;
    one whose figure is not finite left out, and said in `left`."""
    figures = [(c, Figure(f"c{c}.{what}", levels[c].get(what, 0))) for c in sorted(levels)]
    kept = [(c, f.value) for c, f in figures if _finite(left, where, f)]
    return [c for c, _ in kept], [v for _, v in kept]


def _levels(metrics: dict) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for name, m in metrics.items():
        if name.startswith("c") and "." in name and name[1:].split(".")[0].isdigit():
            c, what = name[1:].split(".", 1)
            out[int(c)][what] = m.value
    return out


def _history(history: list[dict], runs: list[dict], path: Path) -> list[str]:
    import matplotlib.pyplot as plt

    order = {r["id"]: i for i, r in enumerate(runs)}
    rows = -(-len(HISTORY) // 2)
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.5 * rows), sharex=True, squeeze=False)
    left: list[str] = []
    for ax, (metric, title, log) in zip(axes.flat, HISTORY, strict=False):
        series: dict[str, list] = defaultdict(list)
        for row in history:
            name = row["name"]
            if metric == "output_tok_s_ratio":
                if not name.endswith(".output_tok_s_ratio"):
                    continue
            elif name != metric:
                continue
            series[f"{row['model']} × {row['cell']}"].append(
                (order[row["run_id"]], row["run_id"], Figure(name, row["value"], row["se"]))
            )
        drawn = False
        for label, pts in sorted(series.items()):
            if pts := _plotted(left, f"history {label}", _last_per_run(pts)):
                ax.errorbar(*zip(*pts, strict=True), fmt="o-", capsize=2, label=label)
                drawn = True
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if log and drawn:
            ax.set_yscale("log")
        if drawn:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(HISTORY) :]:  # an odd count leaves one panel empty
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("run")
        ax.set_xticks(range(len(runs)), [r["id"][:13] for r in runs], rotation=30, fontsize=7)
    fig.suptitle("History over nightly runs")
    return _save(fig, path, left)


def _last_per_run(points: list[tuple]) -> list[tuple]:
    """One point per run (the highest concurrency's ratio when several)."""
    by_run = {}
    for point in points:
        by_run[point[0]] = point
    return [by_run[x] for x in sorted(by_run)]


def _plotted(left: list[str], where: str, points: list[tuple]) -> list[tuple]:
    """A history line's (x, value, error bar) points; those not finite left out, said in
    `left` with their run."""
    return [
        (x, f.value, _bar(left, f"{where} {run_id}", f))
        for x, run_id, f in points
        if _finite(left, f"{where} {run_id}", f)
    ]


class Figure(NamedTuple):
    """A figure as the plots read it (the store's Metric, or a history row)."""

    name: str
    value: float
    se: float | None = None


def _finite(left: list[str], where: str, *figures: Figure | Metric) -> bool:
    """Whether every figure's value is finite (a point matplotlib can place); the others are
    said in `left` as "<where> <name> <value>"."""
    lost = [f"{where} {f.name} {f.value:.4g}" for f in figures if not math.isfinite(f.value)]
    left += lost
    return not lost


def _bar(left: list[str], where: str, figure: Figure | Metric) -> float:
    """A figure's error bar: its SE, 0 where it has none or one not finite (said in `left`)."""
    if figure.se is not None and not math.isfinite(figure.se):
        left.append(f"{where} {figure.name} SE {figure.se:.4g}: no error bar")
        return 0.0
    return figure.se or 0.0


def _left_out(left: list[str]) -> str:
    return "not plotted (not finite): " + "; ".join(left)


def _save(fig, path: Path, left: list[str]) -> list[str]:
    """Write the figure (with what it left out, if anything, under it); `left` back."""
    if left:
        note = textwrap.fill(_left_out(left), 160)
        fig.text(0.01, 0.01, note, fontsize=7, va="bottom")
        fig.tight_layout(rect=(0, 0.03 * (note.count("\n") + 2), 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return left


def _markdown(latest: dict, runs: list[dict], table: str) -> str:
    return (
        f"# Nightly report {latest['started'][:10]}\n\n"
        f"Latest run `{latest['id']}` ({latest['started']} → "
        f"{latest['ended'] or 'interrupted'}), {len(runs)} runs in the store. "
        f"Generated {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.\n\n"
        f"```\n{table}\n```\n\n"
        "![Quality drift vs weight memory](pareto.png)\n\n"
        "![Cost vs quality drift](cost.png)\n\n"
        "![Throughput vs concurrency](throughput.png)\n\n"
        "![History](history.png)\n"
    )


def _html(latest: dict, runs: list[dict], table: str) -> str:
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Nightly report {latest["started"][:10]}</title>
<style>{STYLE}</style>
</head><body>
<h1>Nightly report {latest["started"][:10]}</h1>
<p>Latest run <code>{html.escape(latest["id"])}</code> ({latest["started"]} →
{latest["ended"] or "interrupted"}), {len(runs)} runs in the store.</p>
<pre>{html.escape(table)}</pre>
<h2>Quality drift vs weight memory</h2><img src="pareto.png" alt="mean KL vs size">
<h2>Cost vs quality drift</h2><img src="cost.png" alt="$ per 1M output tokens vs mean KL">
<h2>Throughput vs concurrency</h2><img src="throughput.png" alt="output tokens/s vs concurrency">
<h2>History</h2><img src="history.png" alt="metrics over runs">
</body></html>
"""
