"""The nightly's exit status from its rows, and its summary table."""

from pipeline.nightly import night
from pipeline.nightly.regress import Finding
from pipeline.nightly.store import Metric


def _row(status="ok", regressions=(), baseline_regressions=(), **kw):
    row = {"model": "m", "cell": "c", "status": status, "error": None, "metrics": {}}
    row |= {"previous": None, "regressions": list(regressions), "baseline": None}
    return row | {"baseline_regressions": list(baseline_regressions), **kw}


def test_verdict_failed_cell_beats_gate_and_regression():
    assert night.verdict([_row()]) == ("ok", None)
    worse = Finding("kl_mean", 1.0, 2.0, "> 3 SE")
    assert night.verdict([_row(regressions=[worse])])[0] == "gate_failed"
    assert night.verdict([_row(baseline_regressions=[worse])])[0] == "gate_failed"
    assert night.verdict([_row(status="gate_failed")])[0] == "gate_failed"
    status, message = night.verdict([_row(status="gate_failed"), _row(status="failed", cell="d")])
    assert status == "internal_error" and "m × d" in message


def test_render_shows_verdicts_errors_and_regressions():
    kl = Metric("kl_mean", 1.5e-4, 1e-5, "lower", "quality")
    ratio = Metric("c4.output_tok_s_ratio", 0.5, None, "higher", "throughput")
    rows = [
        _row(metrics={"kl_mean": kl, "c4.output_tok_s_ratio": ratio}),
        _row(cell="d", status="failed", error="eval: boom", previous="r1",
             regressions=[Finding("kl_mean", 1e-4, 1.5e-4, "> 3 SE")]),
    ]  # fmt: skip
    text = night.render(rows)
    assert "first run" in text and "REGRESSED (1)" in text and "error: eval: boom" in text
    assert "REGRESSION kl_mean" in text and "0.50×" in text and "0.00015±1e-05" in text


def test_render_names_the_ray_node_and_gpus_a_cell_ran_on():
    rows = [_row(node="10.0.0.2/7a5d951a3e1f", gpus=["0", "1"]), _row(cell="d", node="host")]
    text = night.render(rows)
    assert "ran on 10.0.0.2/7a5d951a3e1f, GPUs 0,1" in text
    assert text.count("ran on") == 1  # a local cell ran on this host: no line for it
