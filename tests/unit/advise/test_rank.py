"""`advise` offline: bounds and plans only (no runs), prices from the shipped table."""

import json
import subprocess
import sys

import pytest

from pipeline.advise import rank as advise
from pipeline.config import recipe
from pipeline.core.runs import Runs
from pipeline.models import aliases
from pipeline.perf import prices
from pipeline.planning import geometry, gpus


@pytest.fixture
def no_runs(tmp_path, monkeypatch) -> Runs:
    """An empty runs folder: handed to advise, and the command line's RUNS_DIR."""
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    return Runs(tmp_path / "runs")


def test_price_per_million_tokens_known_answer():
    price = prices.Price(2.99, "test")
    # $2.99 an hour for 1,000 tokens/s: 3.6M tokens an hour
    assert price.per_million(1, 1000) == pytest.approx(2.99 / 3.6)
    assert price.per_million(2, 1000) == pytest.approx(2 * 2.99 / 3.6)
    assert price.per_million(1, 0) is None


def test_every_gpu_in_the_spec_table_has_a_dated_price_with_a_source():
    table = prices.table()
    assert table["compiled"]
    for name in gpus.SPECS:
        found = prices.gpu(name)
        assert found and found.usd_per_hour > 0 and table["compiled"] in found.source
    assert prices.gpu("h100-80gb", override=1.5).usd_per_hour == 1.5
    assert prices.gpu("unknown") is None
    assert prices.host().usd_per_hour > 0


def test_llama3_70b_fp8_needs_fewer_gpus_and_costs_less_than_the_original(no_runs):
    ref = aliases.resolve("llama3-70b")
    config = aliases.load_config(ref)
    recipes = [recipe.load(n) for n in ("fp8", "gptq", "vllm-fp8")]
    hw = gpus.SPECS["H100-80GB"]
    measured = advise.Measured(no_runs, ref.name)
    rows = advise.advise(measured, geometry.of(config), recipes, hw, prices.gpu(hw.name),
                         advise.Ask(100, 4000))  # fmt: skip
    by = {r.recipe: r for r in rows}
    assert set(by) == {"original", "fp8", "gptq", "vllm-fp8"}
    assert by["fp8"].gpus < by["original"].gpus
    assert by["fp8"].usd_per_million < by["original"].usd_per_million
    assert [r.usd_per_million for r in rows] == sorted(r.usd_per_million for r in rows)
    for name in ("fp8", "gptq", "vllm-fp8"):
        assert by[name].quality == {"source": "not evaluated"}
        assert by[name].performance_source == "bound"
    # the cost follows from the bound: GPUs × price over users / ITL
    fp8 = by["fp8"]
    tokens_s = 100 / (fp8.itl_ms / 1e3)
    assert fp8.usd_per_million == pytest.approx(2.99 * fp8.gpus / (tokens_s * 3600) * 1e6)
    assert fp8.kv_dtype in ("auto", "fp8") and by["original"].quality["source"] == "reference"


def test_an_slo_widens_the_deployment_or_rejects_it(no_runs):
    ref = aliases.resolve("llama3-70b")
    config = aliases.load_config(ref)
    hw = gpus.SPECS["H100-80GB"]
    fp8 = [recipe.load("fp8")]
    measured, g = advise.Measured(no_runs, ref.name), geometry.of(config)
    loose = advise.advise(measured, g, fp8, hw, None, advise.Ask(100, 4000))
    tight = advise.advise(measured, g, fp8, hw, None, advise.Ask(100, 4000, slo_itl_ms=15))
    loose_fp8 = next(r for r in loose if r.recipe == "fp8")
    tight_fp8 = next(r for r in tight if r.recipe == "fp8")
    assert tight_fp8.gpus > loose_fp8.gpus and tight_fp8.itl_ms <= 15 and tight_fp8.meets_slo
    impossible = advise.advise(measured, g, fp8, hw, None, advise.Ask(100, 4000, slo_itl_ms=0.01))
    assert all(r.rejected == "misses the SLO" for r in impossible)


def test_cli_prints_the_table_offline_without_torch(no_runs):
    code = (
        "import sys, runpy; sys.argv = ['pipeline', 'advise', '--model', 'llama3-70b', "
        "'--users', '100', '--context', '4000', '--gpu', 'H100-80GB', '--json']\n"
        "try:\n    runpy.run_module('pipeline', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    rows = {r["recipe"]: r for r in found["rows"]}
    assert rows["fp8"]["gpus"] < rows["original"]["gpus"]
    assert found["price"]["usd_per_hour"] == 2.99


@pytest.mark.parametrize(
    "args",
    [["--gpu", "H900"], ["--users", "0"], ["--gpu-hour-usd", "-1"], ["--max-kl", "-0.1"]],
)
def test_bad_input_is_a_one_line_error(no_runs, args):
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "advise", "--model", "llama3-70b", *args],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_model_larger_than_a_node_is_priced_on_pipeline_stages(no_runs):
    """Llama-3.1-405B's original does not fit 8 H100s with 100 × 4,000 tokens of 16-bit KV: it
    is priced on TP 8 × PP 2 (16 GPUs, shown 8×2) with the NIC in its bound; fp8 on one node."""
    ref = aliases.resolve("llama3-405b")
    config = aliases.load_config(ref)
    hw = gpus.SPECS["H100-80GB"]
    rows = advise.advise(None, geometry.of(config), [recipe.load("fp8")], hw, prices.gpu(hw.name),
                         advise.Ask(100, 4000))  # fmt: skip
    by = {r.recipe: r for r in rows}
    original, fp8 = by["original"], by["fp8"]
    assert original.rejected is None and original.gpus == 16 and original.pipeline_stages == 2
    assert fp8.gpus == 8 and fp8.pipeline_stages == 1
    assert original.usd_per_hour == pytest.approx(16 * 2.99)
    assert " 8×2 " in advise.render(rows, "header", prices.gpu(hw.name))


def test_a_recipe_whose_answers_grow_is_priced_per_answer(no_runs, monkeypatch):
    """Tokens per answer as an eval measures them (here given: the eval's own test measures
    them); the ranking reads $ per answer once every candidate has one."""
    lengths = {"fp8": 100.0, "gptq": 400.0}

    def quality(where, recipe_name):
        if recipe_name == "original":
            return {"source": "reference", "kl_mean": 0.0, "kl_mean_se": 0.0, "same_top_pct": 100}
        return {"source": "measured", "kl_mean": 1e-3, "kl_mean_se": 1e-5, "same_top_pct": 98.0,
                "tokens_per_answer": lengths.get(recipe_name),
                "original_tokens_per_answer": 100.0}  # fmt: skip

    monkeypatch.setattr(advise, "_quality", quality)
    ref = aliases.resolve("llama3-70b")
    g, hw = geometry.of(aliases.load_config(ref)), gpus.SPECS["H100-80GB"]
    recipes = [recipe.load(n) for n in ("fp8", "gptq")]
    measured = advise.Measured(no_runs, ref.name)
    rows = advise.advise(measured, g, recipes, hw, prices.gpu(hw.name), advise.Ask(100, 4000))
    by = {r.recipe: r for r in rows}
    assert by["original"].tokens_per_answer == 100.0  # the original's answers, from any eval
    for r in rows:
        assert r.usd_per_answer == pytest.approx(r.usd_per_million * r.tokens_per_answer / 1e6)
    assert [r.usd_per_answer for r in rows] == sorted(r.usd_per_answer for r in rows)
    assert by["gptq"].usd_per_answer > by["fp8"].usd_per_answer  # 4× the tokens per answer
    assert advise.ranked_by(rows).startswith("$ per answer")
    table = advise.render(rows, "header", prices.gpu(hw.name))
    assert "$/1k ans" in table and "ranked by $ per answer" in table
    lengths["gptq"] = None  # one candidate not measured: per 1M tokens, and said so
    rows = advise.advise(measured, g, recipes, hw, prices.gpu(hw.name), advise.Ask(100, 4000))
    assert [r.usd_per_million for r in rows] == sorted(r.usd_per_million for r in rows)
    assert advise.ranked_by(rows).startswith("$ per 1M output tokens")
