"""`make report` from a real SQLite store, in-process: a night whose figures turned NaN or
infinite is reported as regressed ("not finite"), and its plots leave those points out, say so,
and draw without a warning (matplotlib warned on inf, and a -inf SE stopped the report)."""

import warnings

from pipeline.nightly import report
from pipeline.nightly.store import Store
from tests.unit.nightly.test_store import FACTS

NAN, INF = float("nan"), float("inf")
PLOTS = ("pareto", "cost", "throughput", "history")
FINITE = {"kl_mean": (0.01, 1e-3), "same_top_pct": (99.0, 0.1), "c4.output_tok_s_ratio": (1.5, 0.1)}
LOST = {"kl_mean": (NAN, NAN), "same_top_pct": (-INF, -INF), "c4.output_tok_s_ratio": (INF, INF)}


def _cell(figures: dict[str, tuple[float, float]]) -> dict:
    """A served and evaluated cell: every figure the four plots draw (`figures`: the gated
    ones, value and SE)."""
    ratio = figures["c4.output_tok_s_ratio"][0]
    rows = [
        ("kl_mean", *figures["kl_mean"], "lower", "quality"),
        ("same_top_pct", *figures["same_top_pct"], "higher", "quality"),
        ("ppl_ratio", 1.01, None, "lower", "quality"),
        ("checkpoint_bytes", 5 * report.MIB, None, "lower", "memory"),
        ("original_bytes", 10 * report.MIB, None, "lower", "memory"),
        ("c4.output_tok_s_ratio", *figures["c4.output_tok_s_ratio"], "higher", "throughput"),
        ("c4.output_tok_s", 100 * ratio, None, "higher", "throughput"),
        ("c4.original_tok_s", 100.0, None, "higher", "throughput"),
        ("c4.usd_per_million", 1.5 / ratio, None, "lower", "cost"),
        ("c4.original_usd_per_million", 1.5, None, "lower", "cost"),
    ]
    keys = ("name", "value", "se", "better", "kind")
    metrics = [dict(zip(keys, row, strict=True)) for row in rows]
    return {"model": "m", "cell": "c", "recipe": "fp8", "status": "ok", "stages": {},
            "metrics": metrics, "where": {}}  # fmt: skip


def _store(tmp_path, *nights: dict) -> str:
    url = f"sqlite:///{tmp_path}/store.db"
    store = Store(url)
    for i, cell in enumerate(nights):
        store.start_run(f"r{i + 1}", "sha", FACTS, "local")
        store.record_cell(f"r{i + 1}", cell)
        store.end_run(f"r{i + 1}")
    store.engine.dispose()
    return url


def _report(tmp_path, *nights: dict) -> tuple[str, str]:
    """(summary.md, index.html) of a report of these nights, each one cell; any warning fails."""
    url = _store(tmp_path, *nights)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's RuntimeWarning, as an exception
        out = report.write(url, tmp_path / "reports")
    assert all((out / f"{plot}.png").stat().st_size > 0 for plot in PLOTS)
    return (out / "summary.md").read_text(), (out / "index.html").read_text()


def _left_out(summary: str) -> list[str]:
    """What the report says its plots left out, one entry each."""
    (line,) = [x for x in summary.splitlines() if x.startswith("not plotted")]
    return line.removeprefix("not plotted (not finite): ").split("; ")


def test_figures_no_longer_finite_regress_and_are_left_out_of_the_plots(tmp_path):
    summary, page = _report(tmp_path, _cell(FINITE), _cell(LOST))
    assert "REGRESSED (3)" in summary, summary
    for finding in ("kl_mean 0.01 → nan (not finite)", "same_top_pct 99 → -inf (not finite)",
                    "c4.output_tok_s_ratio 1.5 → inf (not finite)"):  # fmt: skip
        assert f"REGRESSION {finding}" in summary, summary
    assert _left_out(summary) == [
        "pareto m × c kl_mean nan",
        "cost m × c kl_mean nan",
        "throughput m × c c4.output_tok_s inf",
        "history m × c r2 kl_mean nan",
        "history m × c r2 same_top_pct -inf",
        "history m × c r2 c4.output_tok_s_ratio inf",
    ]
    assert "not plotted (not finite): pareto m × c kl_mean nan;" in page


def test_a_figure_finite_again_is_no_regression(tmp_path):
    summary, _ = _report(tmp_path, _cell(LOST), _cell(FINITE))
    assert "ok vs r1" in summary and "REGRESS" not in summary, summary
    assert _left_out(summary) == [  # the first night's points; the last night plots whole
        "history m × c r1 kl_mean nan",
        "history m × c r1 same_top_pct -inf",
        "history m × c r1 c4.output_tok_s_ratio inf",
    ]


def test_a_standard_error_not_finite_is_drawn_without_its_bar(tmp_path):
    """A -inf SE stopped the report (matplotlib refuses negative error bars)."""
    figures = {**FINITE, "kl_mean": (0.01, NAN), "same_top_pct": (99.0, -INF)}
    summary, _ = _report(tmp_path, _cell(figures))
    assert _left_out(summary) == [
        "pareto m × c kl_mean SE nan: no error bar",
        "cost m × c kl_mean SE nan: no error bar",
        "history m × c r1 kl_mean SE nan: no error bar",
        "history m × c r1 same_top_pct SE -inf: no error bar",
    ]


def test_a_finite_night_says_nothing_was_left_out(tmp_path):
    summary, _ = _report(tmp_path, _cell(FINITE))
    assert "not plotted" not in summary and "first run" in summary, summary
