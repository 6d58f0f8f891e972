"""Eval stage on tiny-llama with the hf backend: tables, caching, gates, known answers."""

import json

import pytest

from .conftest import REPO, cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def evaluated(quantized, session_runs):
    """evaluated(recipe) → (results dict, first CLI result), evaluating once per session."""
    done = {}

    def get(recipe: str):
        if recipe not in done:
            quantized(recipe)
            result = cli("eval", "--recipe", recipe, runs=session_runs)
            assert result.returncode in (0, 1), result.stderr[-3000:]
            path = session_runs / "tiny-llama" / recipe / "eval" / "results.json"
            done[recipe] = (json.loads(path.read_text()), result)
        return done[recipe]

    return get


def test_eval_prints_both_splits_and_writes_json(evaluated, session_runs):
    results, result = evaluated("gptq")
    assert result.returncode == 0, result.stdout + result.stderr
    for split in ("heldout", "calibration"):
        assert f"\n{split} " in result.stdout
        m = results["splits"][split]
        assert m["tokens"] == 16863  # 33 windows × 511 scored tokens: the 16,384 budget, whole
        assert 0 <= m["kl_p50"] <= m["kl_p99"] <= m["kl_max"] and m["kl_mean_se"] > 0
        assert 90 < m["same_top_pct"] <= 100 and m["reference_bytes_per_token"] == 264
    assert results["gates"]["passed"] and len(results["gates"]["checks"]) == 3
    manifest = json.loads((session_runs / "tiny-llama" / "gptq" / "manifest.json").read_text())
    assert manifest["stages"]["eval"]["status"] == "done"
    assert (
        manifest["stages"]["eval"]["metrics"]["splits"]["heldout"] == results["splits"]["heldout"]
    )


def test_rerun_reuses_results_and_other_recipes_reuse_the_reference(evaluated, session_runs):
    evaluated("gptq")
    again = cli("eval", "--recipe", "gptq", runs=session_runs)
    assert again.returncode == 0 and "cached" in again.stdout
    results, _ = evaluated("fp8")  # evaluated after gptq: the original's outputs are on disk
    assert all(results["splits"][s]["reference_cached"] for s in ("heldout", "calibration"))


def test_failed_gate_exits_1_and_names_it(tmp_path, quantized, session_runs):
    quantized("gptq")
    text = (
        (REPO / "recipes" / "gptq.yaml")
        .read_text()
        .replace("min_same_top_pct: 85", "min_same_top_pct: 99.99")
    )
    strict = tmp_path / "gptq.yaml"  # same name: reuses the session's gptq run directory
    strict.write_text(text)
    result = cli("eval", "--recipe", str(strict), runs=session_runs)
    assert result.returncode == 1
    assert "eval gate failed: min_same_top_pct" in result.stderr


def test_original_against_itself_is_zero_kl(tiny_model):
    from transformers import AutoTokenizer

    from pipeline import drift, eval_data, reference
    from pipeline.backends import hf
    from pipeline.corpus import read_split
    from pipeline.stages.eval import _score

    tok = AutoTokenizer.from_pretrained(tiny_model)
    windows = eval_data.windows(tok, read_split("heldout"), 256, 2048)
    model = hf.load(tiny_model)
    ref = reference.compute(hf, model, windows, 32, "reference")
    s = drift.summarize(_score(hf, model, windows, ref, "self"))
    assert (
        s["kl_mean"] < 1e-6 and s["same_top_pct"] == 100.0 and s["ppl_ratio"] == pytest.approx(1.0)
    )


def test_gptq_drifts_less_than_round_to_nearest(evaluated):
    gptq = evaluated("gptq")[0]["splits"]["heldout"]
    rtn = evaluated("w4a16-rtn")[0]["splits"]["heldout"]
    gap = rtn["kl_mean"] - gptq["kl_mean"]
    assert gap > 3 * (rtn["kl_mean_se"] ** 2 + gptq["kl_mean_se"] ** 2) ** 0.5
