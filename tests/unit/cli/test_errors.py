"""Mistakes that cost nothing to find: one line on stderr, exit 2, nothing created. (Those that
need the tiny model or calibration data are in tests/e2e/test_cli_errors.py.)"""

import json
import os
import subprocess

import pytest

from pipeline.cli.main import main
from pipeline.config import recipe
from tests.conftest import REPO, cli


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
    # 4 where this host's memory or disk refuses the plan: the plan is printed first
    assert result.returncode in (0, 4), result.stderr
    out = result.stdout
    assert "meta-llama/Meta-Llama-3-70B-Instruct" in out and "70.55B params" in out
    assert "512 samples × 2048 tokens" in out and "one decoder layer at a time" in out
    assert "fits one 80 GB GPU: yes" in out
    assert not any(tmp_path.rglob("*"))


@pytest.mark.parametrize("name", recipe.shipped())
def test_dry_run_json_for_every_recipe_on_every_alias(tmp_path, monkeypatch, capsys, name):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    for alias in ("llama3-8b", "mistral-7b", "qwen2.5-7b", "mixtral-8x7b", "qwen3-30b-a3b"):
        code = main(["quantize", "--model", alias, "--recipe", name, "--dry-run", "--json"])
        assert code in (0, 4)  # 4: this host refuses the plan (its memory or disk), printed
        plan = json.loads(capsys.readouterr().out)
        if "online" in plan:  # vLLM quantizes at load: FP8 in memory, the 16-bit checkpoint
            ratio = plan["online"]["in_engine_estimate"] / plan["online"]["weights_bf16"]
            assert plan["online"]["engine_args"] == ["--quantization", "fp8"]
        else:
            ratio = plan["memory_bytes"]["artifact_estimate"] / plan["memory_bytes"]["weights_bf16"]
        assert 0.2 < ratio < 0.75


SERVE_CASES = {
    "settings out of range": (["--gpu-memory-utilization", "2"], "serve settings:"),
    "bad concurrency list": (["--concurrency", "0,4"], "expected positive integers"),
}


@pytest.mark.parametrize("case", list(SERVE_CASES))
def test_bad_serve_input_is_one_line_exit_2(tmp_path, case, cpu_host_env):
    """On a host that serves: a CPU host (the CUDA build where no GPU is visible refuses a serve
    before it reads the settings, exit 4: tests/unit/serve/test_serving_env.py)."""
    from pipeline.engines.vllm import serving_env

    if not serving_env.available():
        pytest.skip("serving env not built (make setup)")
    args, message = SERVE_CASES[case]
    result = cli("serve", "--recipe", "fp8", *args, runs=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]


@pytest.mark.parametrize(
    "argv",
    [[command, "--recipe", ""] for command in ("quantize", "eval", "serve", "run")]
    + [
        ["quantize", "--recipe", "", "--dry-run"],
        ["publish", "--recipe", "", "--repo", "file:///tmp/nowhere"],
        ["plan", "--model", "llama3-8b", "--recipe", ""],
        ["quantize", "--model", ""],
        ["eval", "--model", "  "],
        ["quantize", "--artifact", ""],
    ],
)
def test_an_empty_recipe_model_or_artifact_is_refused_never_defaulted(
    tmp_path, monkeypatch, capsys, argv
):
    """An unset shell variable (RECIPE="$R") must not quietly run the default recipe."""
    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    assert main(argv) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert "no recipe given" in line or "no model given" in line or "is empty" in line, line
    assert not any(tmp_path.iterdir())
