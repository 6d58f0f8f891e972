"""`advise` with runs present: tiny-llama's measured quality (the latest eval of each recipe),
and on `--gpu host` the measured serve in place of the bound."""

import json

from tests.conftest import cli
from tests.e2e.conftest import results_path


def test_advise_shows_the_measured_kl_and_on_this_host_the_measured_cost(
    evaluated, served_fp8, session_runs
):
    evaluated("fp8")
    served, _ = served_fp8
    run = session_runs / "tiny-llama" / "fp8"
    heldout = json.loads(results_path(run, "eval").read_text())["splits"]["heldout"]
    on_h100 = cli("advise", "--recipe", "fp8", "--recipe", "awq", "--json", runs=session_runs)
    assert on_h100.returncode == 0, on_h100.stderr[-2000:]
    rows = {r["recipe"]: r for r in json.loads(on_h100.stdout)["rows"]}
    assert rows["fp8"]["quality"]["source"] == "measured"
    assert rows["fp8"]["quality"]["kl_mean"] == heldout["kl_mean"]
    assert rows["fp8"]["performance_source"] == "bound"  # served on this CPU, not an H100
    if not (session_runs / "tiny-llama" / "awq" / "manifest.json").is_file():
        assert rows["awq"]["quality"] == {"source": "not evaluated"}
    here = cli("advise", "--recipe", "fp8", "--gpu", "host", "--users", "4", runs=session_runs)
    assert here.returncode == 0, here.stderr[-2000:]
    line = next(x for x in here.stdout.splitlines() if x.startswith("fp8 "))
    assert "measured" in line and f"{heldout['kl_mean']:.2e}" in line
    level = next(lv for lv in served["quantized"]["levels"] if lv["concurrency"] == 4)
    assert f"{level['output_tok_s']:.1f}" in line  # tokens/s per host, as served
