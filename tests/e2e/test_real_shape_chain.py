"""The whole chain at a real model's shapes (Llama-3-8B's layers and vocabulary, one decoder
layer: 1.3B parameters, weights dominate): `run --dry-run`, then `run` — model-free fp8 and
drift on the hf backend with a test-sized token budget (70 s alone on 2 cores).

- the plan's memory (quantize and eval peak RSS) and disk (the files the run wrote) are within
  25% of what the run used, and the eval's time estimate within 2×;
- opt-in (PIPELINE_REAL_SHAPE_SERVE=1: ~15 minutes on 2 AVX2 cores, where vLLM's CPU build
  emulates FP8 at 0.3 tokens/s): the paired serve, each engine's memory against the plan, and
  each side's measured decode against this host's roofline bound — no engine beats it, and
  with weights dominating vLLM comes within a sane fraction of it.
"""

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli, scratch
from tests.e2e.conftest import needs_serving_env, results_path

pytestmark = pytest.mark.slow
GIB = 2**30


@pytest.fixture(scope="module")
def settings_recipe(tmp_path_factory) -> Path:
    """fp8 with a test-sized eval (two windows of 256 tokens a split: the noise floor's batch
    of 2, no tasks) and serve (one repeat)."""
    recipe = yaml.safe_load((REPO / "recipes" / "fp8.yaml").read_text())
    # two answers of 8 tokens: generation runs, at a 1.3B layer's cost on two cores
    recipe["eval"] |= {"context_length": 256, "max_tokens": 510, "tasks": [],
                       "generation": {"limit": 2, "max_new_tokens": 8}}  # fmt: skip
    recipe["serve"] = {"input_len": 32, "output_len": 16, "concurrency": [1, 4],
                       "num_prompts": 8, "repeats": 1}  # fmt: skip
    path = tmp_path_factory.mktemp("recipe") / "fp8.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def _run(real_shape, settings_recipe, runs: Path, stages: str) -> dict:
    args = ("--model", str(real_shape), "--recipe", str(settings_recipe), "--stages", stages)
    dry = cli("run", *args, "--dry-run", "--json", runs=runs)
    assert dry.returncode == 0, dry.stderr[-3000:]
    done = cli("run", *args, runs=runs, timeout=3600, fresh=True)  # measures its memory
    # 3: a random-init model's drift fails the quality gates, which is not what is checked here
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = [p for p in runs.glob("*/*") if (p / "manifest.json").is_file()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {"plan": json.loads(dry.stdout), "stages": manifest["stages"], "run_dir": run_dir,
            "stdout": done.stdout}  # fmt: skip


@pytest.fixture(scope="module")
def chain(real_shape, settings_recipe, tmp_path_factory):
    with scratch(tmp_path_factory, "chain") as runs:
        found = _run(real_shape, settings_recipe, runs, "eval")
        assert {p.name for p in runs.iterdir()} == {found["run_dir"].parent.name}
        yield found


@pytest.fixture(scope="module")
def served(chain, real_shape, settings_recipe) -> dict:
    if os.environ.get("PIPELINE_REAL_SHAPE_SERVE") != "1":
        pytest.skip("opt-in: PIPELINE_REAL_SHAPE_SERVE=1 (~15 min on 2 AVX2 cores)")
    needs_serving_env()
    found = _run(real_shape, settings_recipe, chain["run_dir"].parent.parent, "serve")
    return found | {"serve": json.loads(results_path(found["run_dir"], "serve").read_text())}


def within(measured: float, planned: float, tolerance: float) -> bool:
    return (1 - tolerance) * planned <= measured <= (1 + tolerance) * planned


def test_the_plans_memory_is_within_25_percent_of_each_stage(chain):
    plan, stages = chain["plan"]["stages"], chain["stages"]
    for stage in ("quantize", "eval"):
        measured, planned = stages[stage]["metrics"]["peak_rss_bytes"], plan[stage]["cpu_ram_bytes"]
        assert within(measured, planned, 0.25), (stage, measured / GIB, planned / GIB)


def test_the_plans_disk_is_within_25_percent_of_what_the_run_wrote(chain):
    planned = sum(place["total_bytes"] for place in chain["plan"]["disk"])
    written = sum(
        p.stat().st_size for p in chain["run_dir"].parent.parent.rglob("*") if p.is_file()
    )
    assert within(written, planned, 0.25), (written / GIB, planned / GIB)


def test_the_plans_eval_time_is_within_2x(chain):
    """Measured overheads of an earlier eval on this host (in a full run, the session's
    tiny-llama ones) + the roofline bound of scoring this model; with no earlier eval measured
    here, the bound alone (its float32 share of the probed rate, HF_CPU_FORWARD_SHARE, is an
    average: a run may beat it, by less than half)."""
    plan = chain["plan"]["stages"]["eval"]
    metrics = chain["stages"]["eval"]["metrics"]
    # loading is measured apart and said to be outside the estimate (2 × 5 GB of float32 here:
    # 30 to 50 s of the eval on an AMX host, 2026-12-02, with the host's load). Measured in CPU
    # time: the plan is for the one thread the eval has, and the other test worker's engines and
    # clusters take turns on that core (wall 88 s beside them against a 39 s plan, 2026-12-05)
    estimate = plan["time_seconds"]
    measured = metrics["cpu_seconds"] - metrics["load_cpu_seconds"]
    assert "loading the two models is not in it" in plan["time"]
    assert 0 < metrics["load_seconds"] < metrics["wall_seconds"]
    assert measured > 0
    assert measured / 2 <= estimate <= 2 * measured, (estimate, measured, plan["time"])


def test_serve_memory_and_decode_against_this_hosts_roofline_bound(served):
    engines = served["plan"]["stages"]["serve"]["engines"]
    for side, planned_side in (("original", "original"), ("quantized", "fp8")):
        measured = served["serve"][side]["engine"]["memory_after_bench_bytes"]
        planned = engines[planned_side]["cpu_ram_bytes"]
        assert within(measured, planned, 0.25), (side, measured / GIB, planned / GIB)
    check = served["serve"]["bound"]
    assert check["hardware"].startswith("this host")
    for side in ("original", "quantized"):
        for level in check[side]:
            ratio = level["measured_over_bound"]
            # no engine beats the bound; at this size the weights, not overheads, decide
            assert 0.01 < ratio <= 1.0, (side, level)
    assert "decode vs the roofline bound" in served["stdout"]
