"""The planners obey vLLM 0.32's layout rule (planning/layout.py): no plan, advice or serve
launch at a TP whose split straddles the recipe's blocks or groups; expert parallel where the
model's experts are what straddles, and the reason said."""

import json

import pytest

from pipeline.cli.main import main
from pipeline.config import recipe
from pipeline.models import aliases
from pipeline.planning import deployment, geometry, layout
from pipeline.planning.deployment import Load
from pipeline.planning.gpus import named

ACCEPTANCE = ["--users", "400", "--context", "8000", "--gpu", "L40S-48GB"]


def _qwen() -> dict:
    return aliases.load_config(aliases.resolve("qwen3-30b-a3b"))


def _plan_json(capsys, model: str, recipe_name: str) -> list[dict]:
    code = main(["plan", "--model", model, "--recipe", recipe_name, *ACCEPTANCE, "--json"])
    assert code == 0
    return json.loads(capsys.readouterr().out)["rows"]


def _loads(config: dict, recipe_name: str, row: dict) -> bool:
    found = recipe.load(recipe_name)
    return (
        layout.recipe_refusal(geometry.of(config), found, row["tp"], row["expert_parallel"]) is None
    )


@pytest.mark.parametrize("recipe_name", ["fp8-block", "gptq"])
def test_plan_for_qwen3_moe_recommends_a_layout_vllm_loads_and_says_why(capsys, recipe_name):
    """The acceptance: TP 8 × PP 2 slices Qwen3-30B-A3B's 768-wide experts into 96 a rank;
    the plan turns expert parallel on for it, and says so in its table and its JSON."""
    config = _qwen()
    rows = [
        r for r in _plan_json(capsys, "qwen3-30b-a3b", recipe_name) if r["recipe"] != "original"
    ]
    assert rows and all(_loads(config, recipe_name, r) for r in rows)
    at_eight = [r for r in rows if r["tp"] == 8]
    assert at_eight and all(r["expert_parallel"] for r in at_eight)
    for r in at_eight:
        assert r["engine_flags"].endswith(layout.EP_FLAG)
        assert any("768-wide experts" in why and "into 96" in why for why in r["refused"])

    assert main(["plan", "--model", "qwen3-30b-a3b", "--recipe", recipe_name, *ACCEPTANCE]) == 0
    text = capsys.readouterr().out
    assert f"{recipe_name}: vLLM 0.32 would refuse" in text
    assert "TP 8 slices the 768-wide experts (mlp.experts) into 96" in text
    assert "expert parallel instead" in text
    assert "--pipeline-parallel-size 2 --distributed-executor-backend ray --enable-expert-" in text


def test_the_original_is_never_refused_nor_put_on_expert_parallel(capsys):
    rows = _plan_json(capsys, "qwen3-30b-a3b", "fp8-block")
    original = [r for r in rows if r["recipe"] == "original"]
    assert original and not any(r["expert_parallel"] or r["refused"] for r in original)


def test_llama3_70b_fp8_plan_is_unchanged(capsys):
    """No experts, channel-wise FP8: every TP loads; the same layouts as before the layout rule
    (the users, and the original's FP8-KV stages, from vLLM's engine memory on an L40S —
    2,048 tokens profiled, 0.9-1.2 GiB a GPU — where a flat 2 GiB was kept before)."""
    rows = _plan_json(capsys, "llama3-70b", "fp8")
    shapes = {(r["recipe"], r["kv_dtype"]): (r["tp"], r["pp"], r["max_users"]) for r in rows}
    assert shapes == {
        ("original", "auto"): (8, 4, 459),
        ("original", "fp8"): (8, 2, 402),
        ("fp8", "auto"): (8, 4, 485),
        ("fp8", "fp8"): (8, 2, 454),
    }
    assert not any(r["expert_parallel"] or r["refused"] for r in rows)
    assert main(["plan", "--model", "llama3-70b", "--recipe", "fp8", *ACCEPTANCE]) == 0
    assert "would refuse" not in capsys.readouterr().out


def test_fewest_passes_over_a_tp_no_split_loads_and_says_why():
    """On one node of 4 H100s, fp8-block at TP 4 needs expert parallel; a small load takes TP 1,
    where nothing straddles, with no reason to give."""
    config, rf = _qwen(), recipe.load("fp8-block")
    weights = 31 * 2**30
    small = deployment.fewest(
        geometry.of(config), Load(weights, "auto", 1, 1000), named("H100-80GB"), recipe=rf
    )
    assert small and small.tensor_parallel_size == 1 and not small.refused
    assert not small.expert_parallel and layout.EP_FLAG not in small.engine_flags()
    split = deployment.split(geometry.of(config), rf, 4)
    assert split.loads and split.expert_parallel and "into 192" in (split.reason or "")
    assert deployment.split(geometry.of(config), None, 4) == deployment.Split(True)


def test_advise_recommends_expert_parallel_where_the_plain_split_is_refused(capsys):
    argv = ["advise", "--model", "qwen3-30b-a3b", "--recipe", "fp8-block", *ACCEPTANCE]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    config = _qwen()
    for r in (r for r in rows if r["recipe"] == "fp8-block" and r["gpus"]):
        tp = r["gpus"] // r["pipeline_stages"]
        assert (
            layout.recipe_refusal(
                geometry.of(config), recipe.load("fp8-block"), tp, r["expert_parallel"]
            )
            is None
        )
        assert (layout.EP_FLAG in r["engine_flags"]) == r["expert_parallel"]
    assert main(argv) == 0
    assert "fp8-block (fp8): vLLM 0.32 would refuse" in capsys.readouterr().out


def _serve(capsys, monkeypatch, tmp_path, *extra: str) -> tuple[int, str, str]:
    from tests.unit.core.test_devices import standin

    standin(monkeypatch, "h100x8")
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    argv = ["serve", "--model", "qwen3-30b-a3b", "--recipe", "fp8-block"]
    code = main([*argv, "--tensor-parallel-size", "8", *extra, "--dry-run", "--json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_serve_refuses_a_tp_whose_expert_split_vllm_would_refuse_in_one_line(
    capsys, monkeypatch, tmp_path
):
    code, out, err = _serve(capsys, monkeypatch, tmp_path, "--no-expert-parallel")
    assert code == 2
    (line,) = [x for x in (out + err).splitlines() if "tensor_parallel_size 8" in x]
    assert "768-wide experts" in line and "--expert-parallel" in line
    assert "loads at TP 1, 2, 4 with --expert-parallel, 8 with --expert-parallel" in line


@pytest.mark.parametrize("asked", [[], ["--expert-parallel"]], ids=["chosen", "asked"])
def test_serve_with_expert_parallel_launches_the_quantized_side_with_it(
    capsys, monkeypatch, tmp_path, asked
):
    """Asked for, or turned on by the stage where TP 8 would straddle the experts' blocks."""
    code, out, err = _serve(capsys, monkeypatch, tmp_path, *asked)
    plan, _ = json.JSONDecoder().raw_decode(out[out.index("{") :])
    argv = plan["stages"]["serve"]["launches"]["quantized"]["argv"]
    assert "tensor_parallel_size 8" not in out + err  # not refused for its layout
    assert layout.EP_FLAG in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    # this host's disk may be too small for the 30B chain (exit 4): any refusal is not TP's
    assert code == 0 or not [r for r in plan["refusals"] if "tensor_parallel" in r]
