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
    results, _ = evaluated("w4a16-rtn")  # after gptq, same backend: the reference is on disk
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
    (ref,) = reference.compute(hf, model, [windows], 32)
    (tokens,) = _score(hf, model, [windows], [ref])
    s = drift.summarize(tokens)
    assert (
        s["kl_mean"] < 1e-6 and s["same_top_pct"] == 100.0 and s["ppl_ratio"] == pytest.approx(1.0)
    )


def test_gptq_drifts_less_than_round_to_nearest(evaluated):
    gptq = evaluated("gptq")[0]["splits"]["heldout"]
    rtn = evaluated("w4a16-rtn")[0]["splits"]["heldout"]
    gap = rtn["kl_mean"] - gptq["kl_mean"]
    assert gap > 3 * (rtn["kl_mean_se"] ** 2 + gptq["kl_mean_se"] ** 2) ** 0.5


def test_backends_agree_on_the_same_artifact(tmp_path, session_runs, tiny_model):
    """hf computes in float32 from the dequantized weights; vLLM in bfloat16 with its own FP8
    kernels. bf16 rounds logits by ~2^-9 relative, which moves perplexity by well under 0.5%
    and per-token KL by ~1e-5 here; a larger gap is a real kernel or loading difference."""
    from pipeline.backends import vllm

    if not vllm.available():
        pytest.skip("serving env not built (make setup)")
    # fp8 with a 4,096-token budget: vLLM's full-vocabulary prompt log-probs are slow on CPU.
    small = tmp_path / "fp8-small.yaml"
    small.write_text((REPO / "recipes" / "fp8.yaml").read_text().replace("16384", "4096"))
    got = {}
    for backend in ("hf", "vllm"):
        result = cli("eval", "--recipe", str(small), "--backend", backend, runs=session_runs)
        assert result.returncode == 0, result.stderr[-3000:]
        path = session_runs / "tiny-llama" / "fp8-small" / "eval" / "results.json"
        got[backend] = json.loads(path.read_text())["splits"]["heldout"]
    hf, vl = got["hf"], got["vllm"]
    for key in ("ppl_original", "ppl_quantized"):
        assert vl[key] == pytest.approx(hf[key], rel=0.005), key
    assert abs(vl["kl_mean"] - hf["kl_mean"]) < 2e-4
    assert abs(vl["same_top_pct"] - hf["same_top_pct"]) < 2.0


def test_vllm_backend_refuses_w4a16_where_its_kernels_are_missing(quantized, session_runs):
    from pipeline.backends import vllm

    if not vllm.available() or vllm.capabilities()["w4a16"]:
        pytest.skip("needs a serving env whose vLLM lacks the W4A16 CPU kernel")
    result = cli("eval", "--recipe", "gptq", "--backend", "vllm", runs=session_runs)
    assert result.returncode == 2 and "no W4A16 GEMM" in result.stderr
