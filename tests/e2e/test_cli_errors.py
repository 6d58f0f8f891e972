"""Bad input: one line on stderr, exit code 2, nothing created under RUNS_DIR."""

import pytest

from tests.conftest import REPO, cli

GPTQ = (REPO / "recipes" / "gptq.yaml").read_text()


def _variant(tmp_path, old: str, new: str) -> str:
    assert old in GPTQ
    path = tmp_path / "variant.yaml"
    path.write_text(GPTQ.replace(old, new))
    return str(path)


CASES = {
    "unknown recipe": (
        lambda t: ["--recipe", "nope"],
        "unknown recipe 'nope'; valid: autoround, awq",
    ),
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


def test_fp8_kv_eval_without_calibrated_scales_on_hf_exits_2(tmp_path):
    """hf can only emulate a KV cache the artifact has scales for (kv_cache_scheme)."""
    variant = _variant(tmp_path, "  gates:", "  kv_cache_dtype: fp8\n  gates:")
    result = cli("eval", "--recipe", variant, "--backend", "hf", runs=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    assert "needs the recipe's kv_cache_scheme" in result.stderr.strip().splitlines()[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*"))
