"""Nightly jobs on tiny-llama: the default matrix twice (the second compares with the first), a
deliberately worse cell flagged with exit 1, an interrupted run resumed, the report's plots,
two writers on one SQLite store, two drivers on one PostgreSQL store; the default matrix's first
run on a local Ray (CPU), as docs/jobs.md shows it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from pipeline.cli import doc_samples
from pipeline.core.rundir import RunDir
from tests.conftest import REPO, cli
from tests.e2e.conftest import SWEEP_SETTINGS, results_path

pytestmark = pytest.mark.slow


def _matrix(tmp_path, name="matrix.yaml", **changes) -> str:
    data = yaml.safe_load((REPO / "evals" / "nightly.yaml").read_text())
    data.update({"serve": SWEEP_SETTINGS, **changes})
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


# The shipped matrix, but gptq's cell without serve: fp8's cell serves paired (served_fp8's
# run, cached: _matrix gives it served_fp8's settings), and a second paired serve (two more
# vLLM start-ups) would prove nothing new here (W4A16 serving: tests/e2e/serve/test_serve_stage.py)
NO_GPTQ_SERVE = [{"model": "tiny-llama", "recipe": "gptq", "stages": ["quantize", "eval"]}]


def _nightly(runs, db, *args, timeout=1800):
    return cli("nightly", "--db", db, *args, runs=runs, timeout=timeout)


@pytest.fixture(scope="module")
def default_twice(quantized, evaluated, served_fp8, session_runs, tmp_path_factory):
    """The shipped matrix (tiny-llama × fp8, gptq; gptq not served) run twice against one
    store. The session's fixtures already made the artifacts, hf evals and the fp8 serve with
    these settings, so both runs find every stage cached: what is measured here is the nightly
    machinery."""
    quantized("gptq"), evaluated("fp8"), evaluated("gptq")
    folder = tmp_path_factory.mktemp("nightly")
    matrix = _matrix(folder, cells=NO_GPTQ_SERVE)
    db = f"sqlite:///{folder}/nightly.db"
    assert not os.environ.get("RAY_ADDRESS")  # unset: a local Ray on this machine's CPUs
    first = _nightly(session_runs, db, "--matrix", matrix, "--executor", "ray")  # jobs.md's
    second = _nightly(session_runs, db, "--matrix", matrix)
    return db, first, second


def test_default_matrix_runs_and_the_second_run_compares(default_twice, served_fp8, session_runs):
    from sqlalchemy import select

    from pipeline.nightly.store import Store
    from pipeline.nightly.store import runs as runs_table

    db, first, second = default_twice
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert first.stdout.count("first run") == 2
    # the first night ran each cell as a Ray task, as jobs.md shows it; the second in-process
    argv = "nightly --executor ray"
    assert not (why := doc_samples.mismatch(argv, first.stdout, session_runs)), why
    assert "executor ray" in first.stdout and "executor local" in second.stdout
    store = Store(db)
    runs = store.run_ids()
    assert len(runs) == 2 and all(r["ended"] for r in runs)
    assert second.stdout.count(f"ok vs {runs[0]['id']}") == 2
    cells = {c["cell"]: c for c in store.cells_of(runs[1]["id"])}
    assert cells["fp8"]["status"] == "ok" and cells["fp8"]["stages"]["serve"] == "done"
    served = results_path(session_runs / "tiny-llama" / "fp8", "serve")
    assert json.loads(served.read_text()) == served_fp8[0]  # the session's serve, reused
    # what each artifact was calibrated on, as its manifest says, beside the cell
    made = RunDir("tiny-llama", "gptq", session_runs).stage("quantize").metrics["calibration"]
    assert cells["gptq"]["calibration"] == made and cells["fp8"]["calibration"] is None
    assert f"token ids sha256 {made['token_ids_sha256'][:12]}" in second.stdout
    metrics = store.metrics_of(runs[1]["id"], "tiny-llama", "fp8")
    assert {"kl_mean", "same_top_pct", "ppl_ratio", "checkpoint_bytes"} <= set(metrics)
    assert metrics["kl_mean"].se > 0 and "c4.output_tok_s_ratio" in metrics
    # the cost of each side at each level, as the serve results have it
    usd = metrics["c4.usd_per_million_ratio"]
    assert usd.value > 0 and metrics["c4.original_usd_per_million"].value > 0
    assert metrics["original_bytes"].value > metrics["checkpoint_bytes"].value
    path = results_path(session_runs / "tiny-llama" / "fp8", "eval")
    assert metrics["kl_mean"].value == json.loads(path.read_text())["splits"]["heldout"]["kl_mean"]
    with store.engine.connect() as c:
        git, libraries, host = c.execute(
            select(runs_table.c.git, runs_table.c.libraries, runs_table.c.host)
        ).first()
    assert git["commit"] and libraries["llmcompressor"] and libraries["vllm"]
    assert host["cpu_count"] > 0 and "hostname" not in host


def test_report_writes_html_and_plots(default_twice, session_runs, tmp_path):
    db, _, _ = default_twice
    result = cli("report", "--db", db, "--out", str(tmp_path / "reports"), runs=session_runs)
    assert result.returncode == 0, result.stderr[-2000:]
    shown = result.stdout.replace(str(tmp_path / "reports"), "reports")
    assert not (why := doc_samples.mismatch("report", shown, session_runs)), why
    (day,) = (tmp_path / "reports").iterdir()
    html = (day / "index.html").read_text()
    for png in ("pareto.png", "cost.png", "throughput.png", "history.png"):
        assert f'src="{png}"' in html
        assert (day / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # a real PNG
        assert (day / png).stat().st_size > 10_000  # with something drawn on it
    assert "tiny-llama" in (day / "summary.md").read_text()


def test_worse_cell_is_a_regression_with_exit_3(default_twice, session_runs, tmp_path):
    """fp8 again, with lm_head quantized too: more drift than its previous run by many SE."""
    db, _, _ = default_twice
    worse = _matrix(
        tmp_path,
        recipes=["fp8"],
        stages=["quantize", "eval"],
        cells=[
            {
                "model": "tiny-llama",
                "recipe": "fp8",
                "recipe_overrides": {
                    "quantization.quant_stage.quant_modifiers.QuantizationModifier.ignore": [],
                    "eval.tasks": [],  # drift is enough here; skips an lm-eval run
                },
            }
        ],
    )
    result = _nightly(session_runs, db, "--matrix", worse)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "REGRESSED" in result.stdout and "REGRESSION kl_mean" in result.stdout


def test_interrupted_run_resumes_where_it_stopped(quantized, session_runs, tmp_path):
    from pipeline.nightly.store import Store

    quantized("fp8")
    db = f"sqlite:///{tmp_path}/resume.db"
    # the second cell quantizes for real (its own calibration: a run directory of its own), so
    # the kill lands between the cells however fast a cached cell is recorded
    slow = {
        "model": "tiny-llama",
        "recipe": "int8",
        "recipe_overrides": {"calibration.num_samples": 8},
    }
    matrix = _matrix(tmp_path, recipes=["fp8", "int8"], stages=["quantize"], cells=[slow])
    cmd = [sys.executable, "-m", "pipeline", "nightly", "--db", db, "--matrix", matrix]
    env = {**os.environ, "RUNS_DIR": str(session_runs)}
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    store = Store(db)
    deadline = time.time() + 600
    while time.time() < deadline:  # stop it once the first cell is recorded
        runs = store.run_ids()
        if runs and store.cells_of(runs[0]["id"]):
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    (run,) = store.run_ids()
    assert run["ended"] is None and len(store.cells_of(run["id"])) == 1
    resumed = _nightly(session_runs, db, "--matrix", matrix)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"nightly run {run['id']} (resumed, 1 cells already recorded): 1 cells" in resumed.stdout
    (again,) = store.run_ids()
    assert again["ended"] and len(store.cells_of(run["id"])) == 2


def test_bad_matrix_is_one_line_exit_2(tmp_path):
    bad = _matrix(tmp_path, recipes=["fp8", "nope"])
    result = cli("nightly", "--matrix", bad, "--db", f"sqlite:///{tmp_path}/x.db", runs=tmp_path)
    assert result.returncode == 2 and "unknown recipe 'nope'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_two_drivers_on_one_matrix_record_every_cell_once(
    default_twice, postgres, session_runs, tmp_path
):
    """Two `pipeline nightly` started together on default_twice's matrix and one PostgreSQL store:
    one run, every cell recorded once by whichever driver claimed it, neither crashes."""
    from pipeline.nightly.store import Store

    db = postgres.database()
    matrix = _matrix(tmp_path, cells=NO_GPTQ_SERVE)
    cmd = [sys.executable, "-m", "pipeline", "nightly", "--db", db, "--matrix", matrix]
    env = {**os.environ, "RUNS_DIR": str(session_runs)}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    drivers = [subprocess.Popen(cmd, cwd=REPO, env=env, **pipes) for _ in range(2)]
    said = [d.communicate(timeout=1200) for d in drivers]
    for driver, (out, err) in zip(drivers, said, strict=True):
        assert driver.returncode == 0, out[-2000:] + err[-2000:]
    store = Store(db)
    (run,) = store.run_ids()
    recorded = sorted((c["model"], c["cell"]) for c in store.cells_of(run["id"]))
    assert recorded == [("tiny-llama", "fp8"), ("tiny-llama", "gptq")]
    assert run["ended"]
    firsts = [out.splitlines()[0] for out, _ in said]
    assert all(f"nightly run {run['id']} (" in line for line in firsts), firsts
