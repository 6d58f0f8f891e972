"""`make compare`'s pure parts: the recipe list, task recovery's spread (delta method), the table
and the plot, from rows as the eval and serve results give them."""

import math

import pytest

from pipeline.core.errors import UserError
from pipeline.eval.results import TaskRow
from pipeline.search import compare_recipes as cr


def _row(recipe: str, **fields) -> cr.Row:
    base = dict(
        size_bytes=7 * 2**20, ratio_to_bf16=0.7, backend="hf",
        drift={"kl_mean": 1e-4, "kl_mean_se": 8e-6, "ppl_ratio": 1.0005, "ppl_ratio_se": 1e-4,
               "same_top_pct": 99.1, "same_top_pct_se": 0.07},
    )  # fmt: skip
    return cr.Row(recipe, **{"status": "ok", **base, **fields})


def test_the_recipe_list_defaults_and_refuses_mistakes():
    assert cr.parse_recipes(None) == ["fp8", "w4a16-rtn", "gptq"]
    assert cr.parse_recipes(" fp8, gptq ,") == ["fp8", "gptq"]
    with pytest.raises(UserError, match="named twice"):
        cr.parse_recipes("fp8,gptq,fp8")
    with pytest.raises(UserError, match="at least one"):
        cr.parse_recipes(" , ")


def test_recovery_spread_is_the_delta_method_of_the_two_scores():
    t = TaskRow(
        task="t", metric="acc", num_fewshot=0, samples=200, original=0.8, original_stderr=0.02,
        quantized=0.76, quantized_stderr=0.03, recovery=0.95, recovery_threshold=None,
    )  # fmt: skip
    assert cr.recovery_se(t) == pytest.approx(0.95 * math.sqrt((0.03 / 0.76) ** 2 + 0.025**2))
    assert cr.recovery_se(t.model_copy(update={"original_stderr": None})) is None
    assert cr.recovery_se(t.model_copy(update={"original": 0.0})) is None


def test_the_tasks_mean_recovery_and_its_se():
    mean, se = cr.mean_with_se([
        {"recovery": 1.0, "recovery_se": 0.03}, {"recovery": 0.9, "recovery_se": 0.04},
    ])  # fmt: skip
    assert mean == pytest.approx(0.95) and se == pytest.approx(0.025)
    assert cr.mean_with_se([]) == (None, None)
    assert cr.mean_with_se([{"recovery": 1.0, "recovery_se": None}]) == (1.0, None)


def test_the_table_shows_each_figure_with_its_spread_and_says_why_one_is_missing():
    served = {"concurrency": 16, "output_tok_s": 812.4, "original_tok_s": 900.0, "ratio": 0.9,
              "ratio_se": 0.03, "spread": [0.85, 0.95], "paired": True}  # fmt: skip
    rows = [
        _row("fp8", recovery=1.01, recovery_se=0.06, tasks={"t": {}}, served=served),
        _row("gptq", status="gate_failed", served_note="not served on this host: no W4A16"),
        cr.Row("awq", "failed", "quantize: out of memory", "internal_error"),
        _row("w4a16-rtn", status="gate_inconclusive", message="200 items cannot show …"),
    ]
    text = cr.render(rows, "tiny-llama")
    rows_named = ("fp8 ", "gptq ", "awq ", "w4a16-rtn ")
    fp8, gptq, awq, rtn = (
        next(x for x in text.splitlines() if x.startswith(n)) for n in rows_named
    )
    assert rtn.endswith("inconclusive")
    assert "1.00e-04 ± 8.0e-06" in fp8 and "1.0005 ± 0.0001" in fp8 and "99.10 ± 0.07" in fp8
    assert "1.010 ± 0.060" in fp8 and "812 @16 (×0.90±0.03)" in fp8 and fp8.endswith("pass")
    assert gptq.endswith("FAIL") and awq == "awq            failed: quantize: out of memory"
    assert "  gptq: not served on this host: no W4A16" in text
    assert "recovery: mean over t" in text


def test_the_plot_has_a_throughput_row_only_where_something_was_served(tmp_path):
    from matplotlib import image

    rows = [_row("fp8", recovery=1.0, recovery_se=0.05), _row("gptq", size_bytes=5 * 2**20)]
    assert cr.write_plot(rows, "tiny-llama", tmp_path / "a.png")
    rows[0].served = {"concurrency": 4, "output_tok_s": 500.0, "original_tok_s": 600.0}
    assert cr.write_plot(rows, "tiny-llama", tmp_path / "b.png")
    one, two = (image.imread(tmp_path / n).shape for n in ("a.png", "b.png"))
    assert two[0] > 1.8 * one[0] and two[1] == one[1]  # a second row of panels
    assert not cr.write_plot([cr.Row("x", "failed", "why")], "m", tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


def test_compare_exits_as_the_eval_of_its_worst_recipe_would():
    """A failed recipe first; a gate that failed or could not decide is exit 3, as `make eval`
    of that recipe; the message names the recipe."""
    ok, fail = _row("fp8"), _row("gptq", status="gate_failed", message="min_same_top_pct")
    unsure = _row("w4a16-rtn", status="gate_inconclusive", message="~313 items would")
    broken = cr.Row("awq", "failed", "quantize: out of memory", "internal_error")
    assert cr.outcome_of([ok], "m", {}).exit_code == 0
    said = cr.outcome_of([ok, unsure], "m", {})
    assert (said.status, said.exit_code) == ("gate_inconclusive", 3)
    assert said.message == "w4a16-rtn: ~313 items would"
    assert cr.outcome_of([unsure, fail], "m", {}).status == "gate_inconclusive"  # the first
    assert cr.outcome_of([fail, broken], "m", {}).status == "internal_error"
