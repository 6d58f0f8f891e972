"""`make search` on tiny-llama (issue 16): the searched mixed-precision recipe must beat, paired
over the same held-out tokens (z > 3), the best uniform recipe within the budget and a random
per-group assignment under the same budget. The uniform recipes' artifacts and evaluations are
the session's own (the recipe-wide tests make them): shared, not redone."""

import json

import pytest

from tests.conftest import cli

pytestmark = pytest.mark.slow


def test_search_beats_the_best_uniform_recipe_and_a_random_assignment(
    evaluated, session_runs, tmp_path_factory
):
    # every shipped recipe at ≤ 6 bits per weight is compared (FP8 / W8A16 need 8+)
    uniform = {"awq", "autoround", "gptq", "mxfp4", "nvfp4", "nvfp4a16", "w4a16-rtn"}
    for name in sorted(uniform):
        evaluated(name)  # the run's artifacts and evals (on two workers, maybe the other's)
    generated = tmp_path_factory.mktemp("generated")
    env = {"GENERATED_RECIPES": str(generated)}
    args = ("search", "--target-bits", "6", "--tokens", "2048")  # 4 windows: enough to rank
    result = cli(*args, runs=session_runs, env=env, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = session_runs / "tiny-llama" / "search-6"
    summary = json.loads((run / "search.json").read_text())
    rows = {r["recipe"]: r for r in summary["rows"]}
    assert set(rows) == {"search-6", "search-6-random", *uniform}
    assert all(r["bits_per_weight"] <= 6 for r in rows.values())
    # each candidate's own gate verdict beside it: it never stops the search
    assert {r["gates"] for r in rows.values()} <= {"pass", "FAIL", "inconclusive"}
    assert rows["search-6"]["bits_per_weight"] > 5.5  # the budget is used, not left idle
    assert summary["best_uniform"] in uniform
    assert rows[summary["best_uniform"]]["z_vs_search"] > 3, rows  # measured z = 15.8 (gptq)
    assert rows["search-6-random"]["z_vs_search"] > 3, rows  # z = 7.5
    assert summary["beats"] == {"random": True, "best_uniform": True}
    assert "search: beats the random control, beats the best uniform recipe" in result.stdout

    # the recipe: config_groups by regex, under GENERATED_RECIPES; its artifact as planned
    text = (generated / "tiny-llama" / "search-6.yaml").read_text()
    assert "config_groups:" in text and "re:^(model\\.layers\\." in text
    quantize = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]["metrics"]
    assert 1.0 <= quantize["ratio_to_ideal"] < 1.02 and quantize["ratio_to_theoretical"] >= 1.0

    again = cli(*args, runs=session_runs, env=env)
    assert again.returncode == 0 and "search tiny-llama at 6 bits: cached" in again.stdout
    assert json.loads((run / "search.json").read_text())["rows"] == summary["rows"]
