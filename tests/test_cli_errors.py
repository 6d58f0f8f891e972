"""Bad input: one line on stderr, exit code 2, nothing created under RUNS_DIR."""

import os
import subprocess

import pytest

from pipeline import recipe

from .conftest import REPO, cli

GPTQ = (REPO / "recipes" / "gptq.yaml").read_text()


def _variant(tmp_path, old: str, new: str) -> str:
    assert old in GPTQ
    path = tmp_path / "variant.yaml"
    path.write_text(GPTQ.replace(old, new))
    return str(path)


CASES = {
    "unknown recipe": (lambda t: ["--recipe", "nope"], "unknown recipe 'nope'; valid: awq"),
    "unknown model": (lambda t: ["--model", "llama-9000"], "unknown model 'llama-9000'"),
    "misspelled pipeline key": (
        lambda t: ["--recipe", _variant(t, "num_samples:", "num_sample:")],
        "unknown key 'calibration.num_sample'",
    ),
    "misspelled modifier key": (
        lambda t: ["--recipe", _variant(t, "dampening_frac", "dampning_frac")],
        "unknown key 'dampning_frac'",
    ),
    "scheme and config_groups both": (
        lambda t: [
            "--recipe",
            _variant(
                t,
                "scheme: W4A16",
                "scheme: W4A16\n        config_groups"
                ": {g: {targets: [Linear], weights: {num_bits: 8}}}",
            ),
        ],
        "either `scheme` or `config_groups`",
    ),
    "misspelled serve key": (
        lambda t: ["--recipe", _variant(t, "  num_prompts: 32", "  num_prompt: 32")],
        "unknown key 'serve.num_prompt'",
    ),
    "calibrating recipe without samples": (
        lambda t: ["--recipe", _variant(t, "num_samples: 512", "num_samples: 0")],
        "recipe variant needs calibration data",
    ),
    "malformed yaml": (
        lambda t: ["--recipe", _variant(t, "targets: [Linear]", "targets: [Linear")],
        "malformed YAML",
    ),
    "missing calibration file": (
        lambda t: ["--recipe", _variant(t, "dataset: python-docs", "dataset: /nope/cal.jsonl")],
        "calibration file not found: /nope/cal.jsonl",
    ),
    "missing text column": (
        lambda t: ["--recipe", _variant(t, "seed: 42", "seed: 42\n  text_column: body")],
        "no column 'body' (columns: text)",
    ),
    "group size that does not divide": (
        lambda t: [
            "--recipe",
            _variant(
                t,
                "scheme: W4A16",
                "config_groups: {g: {targets: "
                "[Linear], weights: {num_bits: 4, type: int, "
                "strategy: group, group_size: 96}}}",
            ),
        ],
        "group size 96 does not divide",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_no_run(tmp_path, case, tiny_model):
    args, message = CASES[case]
    runs = tmp_path / "runs"
    result = cli("quantize", *args(tmp_path), runs=runs)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]
    assert not runs.exists() or not any(runs.rglob("*"))


def test_make_quantize_with_unknown_recipe_exits_2():
    # Under `make test`, the parent make's command-line variables (ARGS=…) would leak in.
    leaks = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "ARGS", "MODEL", "RECIPE")
    env = {k: v for k, v in os.environ.items() if k not in leaks}
    result = subprocess.run(
        ["make", "-s", "quantize", "RECIPE=nope"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert result.returncode == 2
    assert "error: unknown recipe 'nope'" in result.stderr


def test_dry_run_for_llama3_70b_prints_a_plan_offline(tmp_path):
    result = cli(
        "quantize", "--model", "llama3-70b", "--recipe", "gptq", "--dry-run", runs=tmp_path
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "meta-llama/Meta-Llama-3-70B-Instruct" in out and "70.55B params" in out
    assert "512 samples × 2048 tokens" in out and "one decoder layer at a time" in out
    assert "fits one 80 GB GPU: yes" in out
    assert not any(tmp_path.rglob("*"))


@pytest.mark.parametrize("name", recipe.shipped())
def test_dry_run_json_for_every_recipe_on_every_alias(tmp_path, name):
    import json

    for alias in ("llama3-8b", "mistral-7b", "qwen2.5-7b"):
        result = cli(
            "quantize", "--model", alias, "--recipe", name, "--dry-run", "--json", runs=tmp_path
        )
        assert result.returncode == 0, result.stderr
        plan = json.loads(result.stdout)
        ratio = plan["memory_bytes"]["artifact_estimate"] / plan["memory_bytes"]["weights_bf16"]
        assert 0.2 < ratio < 0.75


SERVE_CASES = {
    "settings out of range": (["--gpu-memory-utilization", "2"], "serve settings:"),
    "bad concurrency list": (["--concurrency", "0,4"], "expected positive integers"),
}


@pytest.mark.parametrize("case", list(SERVE_CASES))
def test_bad_serve_input_is_one_line_exit_2(tmp_path, case):
    from pipeline.backends import vllm

    if not vllm.available():
        pytest.skip("serving env not built (make setup)")
    args, message = SERVE_CASES[case]
    result = cli("serve", "--recipe", "fp8", *args, runs=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]


def test_fp8_kv_eval_without_calibrated_scales_on_hf_exits_2(tmp_path):
    """hf can only emulate a KV cache the artifact has scales for (kv_cache_scheme)."""
    variant = _variant(tmp_path, "  gates:", "  kv_cache_dtype: fp8\n  gates:")
    result = cli("eval", "--recipe", variant, "--backend", "hf", runs=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    assert "needs the recipe's kv_cache_scheme" in result.stderr.strip().splitlines()[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*"))
