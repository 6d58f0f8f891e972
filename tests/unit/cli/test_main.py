"""The command line's contract: distinct exit codes, `--json` outcomes on stdout, and commands
that need no model (plan, recipes, publish --dry-run) importing no torch."""

import json
import subprocess
import sys

import pytest

from pipeline.cli.commands.schema import schema_of
from pipeline.cli.main import main
from pipeline.config import recipe
from pipeline.core.outcome import Outcome
from pipeline.core.rundir import RunDir, StageEntry
from tests.conftest import REPO

PROBE = """import sys
from pipeline.cli.main import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "vllm", "llmcompressor", "transformers") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), "CODE=" + str(code), file=sys.stderr)
"""


def finished_quantize(root) -> RunDir:
    """A run dir as a finished `make quantize RECIPE=fp8` leaves it, without the weights work:
    the manifest's quantize entry and an artifact folder."""
    rundir = RunDir("tiny-llama", "fp8", root)
    (rundir.path / "artifact").mkdir(parents=True)
    (rundir.path / "artifact" / "config.json").write_text("{}")
    metrics = {"tensor_bytes": 7 * 2**20, "ratio_to_bf16": 0.7, "quantized_modules": 28}
    metrics |= {"quantized_params": 3_000_000, "calibration_samples": 0, "wall_seconds": 1.0}
    entry = StageEntry(
        status="done",
        started="2026-11-30T00:00:00+00:00",
        ended="2026-11-30T00:00:10+00:00",
        fingerprint="a" * 64,
        inputs={
            "recipe_sha256": recipe.load("fp8").section_sha256("quantization", "calibration"),
            "libraries": {"llmcompressor": "0.14.0.1"},
            "data": None,
        },
        metrics=metrics,
        outputs={"artifact": "artifact"},
    )
    header = {"model": {"name": "tiny-llama", "source": "tiny"}}
    rundir.update(
        header | {"recipe": {"name": "fp8", "path": "x", "sha256": "0"}}, "quantize", entry
    )
    return rundir


def _probe(tmp_path, *argv):
    env = {"RUNS_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=REPO, env=env, capture_output=True, text=True
    )
    last = result.stderr.strip().splitlines()[-1]
    return result, last


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", "llama3-70b"],
        ["recipes"],
        ["publish", "--recipe", "fp8", "--repo", "acme/x", "--dry-run", "--ignore-gates"],
    ],
)
def test_commands_without_a_model_import_no_torch(tmp_path, argv):
    finished_quantize(tmp_path)
    result, last = _probe(tmp_path, *argv)
    assert last == "HEAVY= CODE=0", result.stdout[-2000:] + result.stderr[-2000:]


def test_publish_dry_run_card_says_what_is_missing(tmp_path):
    finished_quantize(tmp_path)
    result, _ = _probe(tmp_path, "publish", "--recipe", "fp8", "--repo", "acme/x", "--dry-run")
    assert "CODE=2" in result.stderr and "eval stage missing" in result.stderr
    result, _ = _probe(
        tmp_path, "publish", "--recipe", "fp8", "--repo", "acme/x", "--dry-run", "--ignore-gates"
    )
    card = (tmp_path / "tiny-llama" / "fp8" / "publish" / "dry-run" / "README.md").read_text()
    assert "Not evaluated." in card and "Not measured." in card and "--ignore-gates" in card
    result, _ = _probe(tmp_path, "publish", "--recipe", "fp8", "--repo", "acme/x", "--dry-run",
                       "--without-serve")  # fmt: skip
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "eval stage missing" in line and "serve" not in line.split(" (")[0]  # not asked
    assert "--without-serve" not in line and "--ignore-gates publishes anyway" in line
    _probe(tmp_path, "publish", "--recipe", "fp8", "--repo", "acme/x", "--dry-run",
           "--without-serve", "--ignore-gates")  # fmt: skip
    card = (tmp_path / "tiny-llama" / "fp8" / "publish" / "dry-run" / "README.md").read_text()
    assert "Not measured (published `--without-serve`)." in card


def _json(capsys, argv) -> tuple[int, Outcome]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # stdout holds the outcome alone; what people read went to stderr
    return code, Outcome.model_validate_json(out[0])


def test_user_error_is_exit_2_with_a_json_outcome(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    code, outcome = _json(capsys, ["quantize", "--recipe", "nope"])
    assert code == outcome.exit_code == 2 and outcome.status == "user_error"
    assert "unknown recipe 'nope'" in outcome.message and not any(tmp_path.iterdir())


def test_host_refusal_is_exit_4(capsys, tmp_path, monkeypatch, cpu_host_env):
    """A CPU host's vLLM without the kernels (AVX2, no AMX)."""
    from pipeline.engines.vllm import serving_env

    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(serving_env, "available", lambda: True)
    caps = {"w4a16": False, "fp8_kv_cache": False, "fp8_moe": False, "w4a16_moe": False}
    monkeypatch.setattr(serving_env, "capabilities", lambda: caps)
    code, outcome = _json(capsys, ["serve", "--recipe", "gptq"])
    assert code == 4 and outcome.status == "unsupported" and "W4A16" in outcome.message
    code, outcome = _json(capsys, ["serve", "--recipe", "fp8-kv"])
    assert code == 4 and "kv_cache_dtype fp8" in outcome.message
    code, outcome = _json(capsys, ["serve", "--model", "mixtral-8x7b", "--recipe", "fp8"])
    assert code == 4 and "FP8 mixture-of-experts" in outcome.message
    code, outcome = _json(capsys, ["eval", "--model", "mixtral-8x7b", "--backend", "vllm"])
    assert code == 4 and "use --backend hf" in outcome.message
    caps["w4a16"] = True  # an AVX-512 host without AMX: dense W4A16 serves, MoE W4A16 not
    code, outcome = _json(capsys, ["serve", "--model", "qwen3-30b-a3b", "--recipe", "gptq"])
    assert code == 4 and "W4A16 mixture-of-experts model (no W4A16 MoE kernel" in outcome.message
    assert not any(tmp_path.iterdir())


def test_a_bug_is_exit_1_internal_error(capsys, tmp_path, monkeypatch):
    from pipeline.cli.commands import recipes

    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(recipes, "handle", lambda args, runs: 1 / 0)
    code = main(["recipes"])
    err = capsys.readouterr().err
    assert code == 1 and "ZeroDivisionError" in err and "Traceback" in err


def test_exit_codes_are_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 ok", "1 internal error", "2 user error", "3 a gate failed", "4 not possible"):
        assert code in text


@pytest.mark.parametrize("name", ["manifest", "eval", "serve", "publish", "outcome"])
def test_schema_command_prints_the_json_schema(capsys, name):
    assert main(["schema", name]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == schema_of(name) and schema["type"] == "object"
    assert "schema_version" in schema["properties"]


def test_the_readme_documents_every_schema_from_the_command():
    from pipeline.cli.schemas import render

    readme = (REPO / "docs" / "schemas.md").read_text()
    assert readme == render(), "docs/schemas.md is stale: make schemas"


def test_run_force_redoes_every_stage_or_the_one_named():
    from pipeline.cli.commands.run import forced as _forced
    from pipeline.core.errors import UserError

    assert _forced(None, ("eval", "serve")) == set()
    assert _forced("all", ("eval", "serve")) == {"quantize", "eval", "serve"}
    assert _forced("eval", ("eval",)) == {"eval"}
    with pytest.raises(UserError, match=r"--force serve: not a stage of this run \(valid: eval"):
        _forced("serve", ("eval",))
