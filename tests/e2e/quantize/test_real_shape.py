"""At a real model's shapes (Llama-3-8B's layers and vocabulary, one decoder layer, 1 GB
shards; pipeline/models/realshape.py, built once per checkout): the model-free path's memory
follows the largest shard, the planner is within 25% of the measured peak RSS on both fp8
paths, both give the same tensors, a host too small for the plan is refused before loading, and
a model-free run killed after a shard resumes there into the same bytes.
GPTQ at this shape takes ~10 minutes a layer on 2 cores: its plan is checked by
benchmarks/quantize_memory.py, not here."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.core.same_tensors import differences
from tests.conftest import REPO, cli, scratch

pytestmark = pytest.mark.slow
GIB = 2**30


def _fp8(real_shape: Path, path: str, runs: Path) -> tuple[dict, Path]:
    """(metrics, artifact folder) of an fp8 quantize on `path`."""
    # fresh: a forked CLI's peak RSS is not a user's (tests/zygote.py)
    result = cli("quantize", "--model", str(real_shape), "--recipe", "fp8", "--path", path,
                 "--json", runs=runs, fresh=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (stage,) = json.loads(result.stdout)["stages"]
    return stage["metrics"], Path(stage["paths"]["artifact"])


@pytest.fixture(scope="module")
def fp8_runs(real_shape, tmp_path_factory):
    """fp8 on each path: {path: (metrics, artifact folder)}, and the "differences" between their
    tensors, taken as soon as both are written: then the oneshot folder goes (2.2 GB; a CI
    host's disk may be short), the model-free one when the module ends."""
    found = {}
    with scratch(tmp_path_factory, "model-free") as kept:
        found["model-free"] = _fp8(real_shape, "model-free", kept)
        with scratch(tmp_path_factory, "oneshot") as runs:
            found["oneshot"] = _fp8(real_shape, "oneshot", runs)
            found["differences"] = differences(found["model-free"][1], found["oneshot"][1])
        yield found


def test_model_free_memory_follows_the_largest_shard(real_shape, fp8_runs):
    metrics, _ = fp8_runs["model-free"]
    largest = max(p.stat().st_size for p in real_shape.glob("*.safetensors"))
    assert largest > 10**9  # the embedding alone fills a 1 GB shard
    assert metrics["peak_rss_bytes"] <= 2 * largest + GIB, metrics["peak_rss_bytes"] / GIB
    # the check read headers and dequantized rows: no second copy of the model
    assert metrics["reload"]["spot_checked"] == metrics["quantized_modules"] == 7
    assert metrics["reload"]["worst_row_error"] < 0.05


@pytest.mark.parametrize("path", ["model-free", "oneshot"])
def test_the_plan_is_within_25_percent_of_the_measured_peak(fp8_runs, path):
    metrics, _ = fp8_runs[path]
    assert metrics["path"] == path
    assert 0.75 <= metrics["peak_rss_ratio_to_plan"] <= 1.25, (
        metrics["peak_rss_bytes"] / GIB,
        metrics["planned_peak_rss_bytes"] / GIB,
    )
    ratio = metrics["peak_rss_bytes"] / metrics["planned_peak_rss_bytes"]
    assert metrics["peak_rss_ratio_to_plan"] == pytest.approx(ratio, abs=1e-3)


def test_both_paths_write_the_same_tensors(fp8_runs):
    assert fp8_runs["differences"] == []


def test_model_free_holds_a_shard_where_oneshot_holds_the_model(fp8_runs):
    model_free, oneshot = fp8_runs["model-free"][0], fp8_runs["oneshot"][0]
    assert oneshot["peak_rss_bytes"] > oneshot["bf16_bytes"]  # the whole model, in bf16
    assert model_free["peak_rss_bytes"] < oneshot["peak_rss_bytes"]


def test_a_host_too_small_for_the_plan_is_refused_before_loading(real_shape, tmp_path):
    result = cli("quantize", "--model", str(real_shape), "--recipe", "fp8", "--path", "oneshot",
                 "--max-memory", "2600MiB", runs=tmp_path)  # fmt: skip
    assert result.returncode == 4, result.stderr[-2000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert "(oneshot) needs ~" in line and "--max-memory 2.5 GiB" in line
    assert "--path model-free" in line  # what would fit
    assert not list(tmp_path.iterdir())
    dry = cli("quantize", "--model", str(real_shape), "--recipe", "fp8", "--path", "oneshot",
              "--max-memory", "2600MiB", "--dry-run", runs=tmp_path)  # fmt: skip
    assert dry.returncode == 4 and "would refuse (exit 4)" in dry.stdout  # as run --dry-run


def test_a_killed_model_free_run_resumes_at_its_first_unwritten_shard(
    real_shape, fp8_runs, tmp_path
):
    """kill -9 once the first of the three shards is written: the same command puts it back
    (the same file, linked) and quantizes the other two, into the uninterrupted run's bytes."""
    command = [sys.executable, "-m", "pipeline", "quantize", "--model", str(real_shape),
               "--recipe", "fp8", "--path", "model-free"]  # fmt: skip
    env = {**os.environ, "RUNS_DIR": str(tmp_path)}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    run = tmp_path / real_shape.name / "fp8"
    progress = run / "artifact.checkpoints" / "progress.json"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(progress.read_text())["done"]:
                break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and not (run / "artifact").exists()

    result = cli("quantize", "--model", str(real_shape), "--recipe", "fp8", "--path",
                 "model-free", "--json", runs=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"resuming at shard 2 of 3 \(1 done, saves ~\d+ s\)", result.stderr)
    (stage,) = json.loads(result.stdout)["stages"]
    assert stage["metrics"]["resumed"]["at"] == "shard 2 of 3"
    assert differences(run / "artifact", fp8_runs["model-free"][1]) == []
    assert not (run / "artifact.checkpoints").exists()
