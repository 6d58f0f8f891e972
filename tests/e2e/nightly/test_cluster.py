"""The nightly on a Ray cluster of three nodes on this host (tests/ray_cluster.py: a head
without GPUs, two workers started with --num-gpus 2, token authentication on), its history in
PostgreSQL (tests/postgres.py): cells placed on both workers and recorded with their node and
GPUs, a cell no node holds refused before the night starts, and a worker lost mid-cell."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli

pytestmark = pytest.mark.slow
# drift only, on 1,024 tokens: what is placed and recorded is the point here, not the figures
DRIFT = {"eval.tasks": [], "eval.max_tokens": 1024, "eval.generation": {"enabled": False}}
SHORT = {"calibration.num_samples": 8}  # and a short calibration
HF_TOKEN = "hf_plantedToken7Kd2Lx"  # in the driver's environment only: searched for below


@pytest.fixture(scope="module")
def cluster(s3):
    """Its nodes started with the bucket's credentials, as a team's are (a task never carries
    them: Ray logs its runtime environment)."""
    from tests.ray_cluster import Cluster

    found = Cluster(workers=2, gpus=2, cpus=1, env=s3.env)
    yield found
    found.stop()


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """A shrunk Llama 3.1 of random weights (pipeline/models/zoo.py): a second model family."""
    from pipeline.models.zoo import build

    return build("llama3.1-8b", tmp_path_factory.mktemp("zoo") / "llama31")


def _matrix(tmp_path, models, name="m.yaml", **changes) -> str:
    light = {**DRIFT, **SHORT}
    data = {
        "models": models,
        "recipes": ["fp8", "gptq"],
        "stages": ["quantize", "eval"],
        "eval_backend": "hf",
        "cells": [
            {
                "model": m,
                "recipe": r,
                "recipe_overrides": DRIFT if m == "tiny-llama" else light,
            }
            for m in models
            for r in ("fp8", "gptq")
        ],
        **changes,
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _as_cell(row: dict):
    """What log_name reads of a cell, from its store row."""
    from types import SimpleNamespace

    return SimpleNamespace(model=row["model"], name=row["cell"])


def _env(cluster) -> dict:
    """The driver's: the cluster's token as a team has it, RAY_AUTH_MODE left to the nightly."""
    return {"RAY_AUTH_TOKEN": cluster.env["RAY_AUTH_TOKEN"], "RAY_ADDRESS": cluster.address}


@pytest.fixture(scope="module")
def night(cluster, postgres, s3, zoo, tiny_model, tmp_path_factory):
    """quantize + eval of tiny-llama × fp8 and the zoo's Llama 3.1 × gptq on the cluster, its
    run folders in a bucket of moto's S3 server (RUNS_DIR=s3://…), its history in PostgreSQL.
    `unused` is the driver's RUNS_DIR had it been local: nothing may land there."""
    from types import SimpleNamespace

    tmp = tmp_path_factory.mktemp("night")
    url = s3.bucket() + "/runs"
    env = {**_env(cluster), **s3.env, "RUNS_DIR": url, "HF_TOKEN": HF_TOKEN}
    db = postgres.database()
    # two cells, one on each worker (a cell takes a worker's one CPU): the model-free path on
    # tiny-llama, the calibrated one on the second family
    cells = [
        {"model": "tiny-llama", "recipe": "fp8", "recipe_overrides": DRIFT},
        {"model": str(zoo), "recipe": "gptq", "recipe_overrides": {**DRIFT, **SHORT}},
    ]
    matrix = _matrix(tmp, ["tiny-llama"], recipes=["fp8"], cells=cells)
    unused = tmp / "unused"
    unused.mkdir()
    result = cli("nightly", "--db", db, "--matrix", matrix, "--executor", "ray",
                 runs=unused, env=env, timeout=1800, fresh=True)  # fmt: skip
    return SimpleNamespace(db=db, url=url, env=env, result=result, unused=unused, tmp=tmp)


def test_cells_spread_over_the_workers_and_record_where_they_ran(cluster, night, zoo):
    from pipeline.nightly.store import Store

    result = night.result
    # 3: the zoo model's random weights fail the quality gates (they mean nothing); it ran
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ran on" in result.stdout  # the cells' logs came back from the bucket
    store = Store(night.db)
    (run,) = store.run_ids()
    cells = store.cells_of(run["id"])
    status = {(c["model"], c["cell"]): c["status"] for c in cells}
    assert status == {("tiny-llama", "fp8"): "ok", (str(zoo), "gptq"): "gate_failed"}
    workers = {n["NodeID"][:12] for n in cluster.alive() if n["Resources"].get("GPU")}
    ran_on = {c["node"].split("/")[-1] for c in cells}
    assert ran_on == workers  # both workers, never the head
    assert all(len(c["gpus"]) == 1 and c["gpus"][0] in ("0", "1") for c in cells)  # Ray's ids
    assert store.metrics_of(run["id"], str(zoo), "gptq")["kl_mean"].value > 0


def test_report_and_publish_from_the_driver_read_the_bucket(night):
    """With the driver's own copy of the run folders deleted, `make report` and `make publish`
    work from what the bucket holds."""
    import shutil

    from pipeline.core.files import sha256_json
    from pipeline.core.paths import mirror_root

    assert night.result.returncode == 3, night.result.stderr[-2000:]
    shutil.rmtree(mirror_root(night.url) / "tiny-llama")
    out = night.tmp / "reports"
    report = cli("report", "--db", night.db, "--out", str(out), runs=night.unused, env=night.env)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "tiny-llama" in "".join(p.read_text() for p in out.rglob("*.md"))
    dest = night.tmp / "published"
    # the cell's recipe: fp8 with the matrix's overrides, written by the driver beside the runs
    digest = sha256_json(DRIFT)[:8]
    recipe = mirror_root(night.url) / "nightly" / "recipes" / f"fp8-{digest}.yaml"
    # no serve stage in this matrix: published anyway, as the card then says
    published = cli("publish", "--recipe", str(recipe), "--repo", f"file://{dest}",
                    "--ignore-gates", runs=night.unused, env=night.env, timeout=600)  # fmt: skip
    assert published.returncode == 0, published.stdout[-2000:] + published.stderr[-2000:]
    assert (dest / "README.md").is_file() and list(dest.glob("*.safetensors"))
    assert not any(night.unused.iterdir())


def test_no_secret_in_any_output_log_manifest_report_or_ray_log(cluster, night):
    """The bucket's secret (every node has it) and the driver's HF_TOKEN: in no output of the
    night, no Ray log of any node (its runtime-env agent logs a task's env_vars), no manifest,
    result or cell log in the bucket's mirror, no report."""
    from pipeline.core.paths import mirror_root
    from tests.conftest import S3_SECRET

    out = night.tmp / "secret-report"
    report = cli("report", "--db", night.db, "--out", str(out), runs=night.unused, env=night.env)
    assert report.returncode == 0, report.stderr[-2000:]
    texts = [night.result.stdout, night.result.stderr, report.stdout, report.stderr]
    folders = [cluster.root, mirror_root(night.url), out]
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file()]
    assert any("runtime_env" in p.name for p in files)  # Ray's agent logs are among them
    for secret in (S3_SECRET, HF_TOKEN):
        assert not [t for t in texts if secret in t]
        leaked = [str(p) for p in files if secret.encode() in p.read_bytes()]
        assert not leaked, (secret, leaked[:5])


def test_a_cell_no_node_holds_is_refused_before_the_night(
    cluster, postgres, session_runs, tmp_path
):
    from pipeline.nightly.store import Store

    db = postgres.database()
    cells = [{"model": "tiny-llama", "recipe": "fp8", "gpus": 3}]
    matrix = _matrix(tmp_path, ["tiny-llama"], cells=cells)
    result = cli("nightly", "--db", db, "--matrix", matrix, "--executor", "ray",
                 runs=session_runs, env=_env(cluster), timeout=600, fresh=True)  # fmt: skip
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and "holds 3 GPUs on one node; no node has them" in said[0]
    assert said[0].count("2 GPUs") == 2 and "0 GPUs" in said[0]  # the shapes it saw
    assert Store(db).run_ids() == []  # nothing recorded: the night never started


@pytest.fixture(scope="module")
def deep_zoo(tmp_path_factory):
    """The same family with 6 layers: its calibration lasts long enough to be stopped in."""
    from pipeline.models.zoo import build

    return build("llama3.1-8b", tmp_path_factory.mktemp("zoo") / "llama31-deep", layers=6)


def test_sigterm_to_the_driver_stops_a_running_cell_through_rays_cancel(
    cluster, postgres, s3, deep_zoo, tmp_path
):
    """SIGTERM to the nightly driver alone (what Kubernetes and Slurm send first) while a cell
    calibrates on a worker: Ray's cancel reaches the cell's task, which hands its command the
    stop. The driver exits 143 in one line; the cell's entry says `interrupted`, not `running`;
    no process of it is left on the worker."""
    import psutil

    from pipeline.core.errors import TERMINATED
    from pipeline.core.paths import mirror_root

    # stopped once its first of 6 layers is kept: the stop has the other 5 (~2 s each here) to
    # cross the driver, Ray's cancel (polled each second) and the cell. The nodes ignore SIGINT
    # (tests/ray_cluster.py), as a background job's processes do: Python then dropped Ray's
    # cancel, and the cell ran to its end. Ray's cancel used to wait for the cell's command to
    # end, and ray.init's SIGTERM handler to exit 15 at once.
    zoo = deep_zoo
    stopped = {
        "model": str(zoo),
        "recipe": "gptq",
        "name": "stopped",
        "recipe_overrides": {"eval.tasks": []},
    }  # its own run folder: gptq-<digest>
    cells = [stopped]
    matrix = _matrix(tmp_path, [str(zoo)], recipes=["fp8"], cells=cells, stages=["quantize"])
    url = s3.bucket() + "/runs"
    env = {**os.environ, **_env(cluster), **s3.env, "RUNS_DIR": url}
    env.pop("RAY_AUTH_MODE", None)
    cmd = [sys.executable, "-m", "pipeline", "nightly", "--db", postgres.database(),
           "--matrix", matrix, "--executor", "ray"]  # fmt: skip
    driver = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kept = mirror_root(url) / zoo.name
    deadline = time.time() + 600
    while not [p for p in kept.glob("gptq*/artifact.checkpoints/progress.json")
               if "pass 0 subgraph 0" in _text(p)]:  # fmt: skip
        if driver.poll() is not None or time.time() > deadline:
            pytest.fail(driver.communicate()[1][-3000:])
        time.sleep(0.2)
    (progress,) = kept.glob("gptq*/artifact.checkpoints/progress.json")
    folder = progress.parent.parent
    driver.send_signal(signal.SIGTERM)
    try:
        _, err = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == TERMINATED, err[-3000:]
    entry = json.loads((folder / "manifest.json").read_text())["stages"]["quantize"]
    assert entry["status"] == "interrupted", entry
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if any(folder.name in a for a in p.info["cmdline"] or [])]  # fmt: skip
    assert left == []


def test_a_worker_lost_mid_cell_is_retried_on_the_survivor_and_the_night_completes(
    cluster, postgres, s3, zoo, tmp_path
):
    """Two slow cells, one on each worker; worker 2 is killed once its cell kept a layer. Its
    cell is retried on worker 1 (Ray's max_retries=1) and resumes there. (The workers share
    this host's cache; a resume from the bucket alone is test_quantize_stage's.)"""
    from pipeline.core.paths import mirror_root
    from pipeline.nightly.cell import log_name
    from pipeline.nightly.store import Store

    db = postgres.database()
    overrides = [{"eval.tasks": [], "calibration.seed": i} for i in (1, 2)]  # two run folders
    cells = [{"model": str(zoo), "recipe": "gptq", "name": f"slow{i}", "recipe_overrides": o}
             for i, o in zip((1, 2), overrides, strict=True)]  # fmt: skip
    matrix = _matrix(tmp_path, [str(zoo)], recipes=["fp8"], cells=cells, stages=["quantize"])
    url = s3.bucket() + "/runs"
    env = {**os.environ, **_env(cluster), **s3.env, "RUNS_DIR": url}
    env.pop("RAY_AUTH_MODE", None)
    cmd = [sys.executable, "-m", "pipeline", "nightly", "--db", db, "--matrix", matrix,
           "--executor", "ray"]  # fmt: skip
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    driver = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, **pipes)
    logs = mirror_root(url) / "nightly" / "logs"  # the workers' (this host's one cache)
    deadline = time.time() + 600
    while time.time() < deadline:  # both slow cells running at once, one on each worker
        texts = [p.read_text() for p in logs.rglob("*slow*.log")]
        if len(texts) == 2 and not any('"schema_version"' in t for t in texts):
            break
        time.sleep(0.5)
    else:
        pytest.fail("the two slow cells never ran at the same time")
    # worker 2 dies once its cell has kept a decoder layer (committed with its run folder)
    lost = _cell_on(cluster, 2)
    progress = mirror_root(url) / zoo.name / lost / "artifact.checkpoints" / "progress.json"
    while time.time() < deadline and "pass 0 subgraph 1" not in _text(progress):
        time.sleep(0.1)
    cluster.kill(2)
    try:
        out, err = driver.communicate(timeout=1500)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode in (0, 1), out[-3000:] + err[-3000:]  # completed: ok, or a cell failed
    store = Store(db)
    (run,) = store.run_ids()
    assert run["ended"]  # the night completed
    cells = {c["cell"]: c for c in store.cells_of(run["id"])}
    assert set(cells) == {"fp8", "slow1", "slow2"}  # each recorded once
    survivor = next(n["NodeID"][:12] for n in cluster.alive() if n["Resources"].get("GPU"))
    for c in cells.values():
        if c["status"] != "ok":
            assert c["error"].startswith("ray:"), c  # failed with Ray's reason
    # the kill landed mid-cell: the lost cell started twice, its retry on the survivor
    attempts = {p.name: p.read_text().count("\n$ ") for p in logs.rglob("*slow*.log")}
    retried = [c for c in cells.values() if attempts.get(log_name(_as_cell(c))) == 2]
    assert len(retried) == 1, (attempts, cells)
    for c in retried:
        assert c["status"] == "ok" and c["node"].endswith(survivor), c
        # the retry went on from the layer the lost node had kept (pulled with its run folder)
        (log,) = logs.rglob(log_name(_as_cell(c)))
        said = log.read_text().split("\n$ ")[-1]
        assert re.search(r"resuming at (layer 2 of 2 \(1 done|the save)", said), said[-2000:]


def _text(path: Path) -> str:
    """A file another process may remove at any moment ("" then)."""
    try:
        return path.read_text()
    except OSError:
        return ""


def _cell_on(cluster, node: int) -> str:
    """The run folder (its recipe's name) of the cell running on worker `node`: the pipeline
    process descended from that node's `ray start`, whose request its log (its stderr) shows."""
    import json

    import psutil

    root = cluster.nodes[node].pid
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if "pipeline" not in argv or "--request" not in argv:
            continue
        try:
            ancestors = {p.pid for p in proc.parents()} | {os.getpgid(proc.pid)}
            log = Path(os.readlink(f"/proc/{proc.pid}/fd/2"))
        except (psutil.Error, OSError):
            continue
        if root in ancestors:
            asked = log.read_text().split("\n$ ")[-1].split(" <<< '", 1)[1].split("'\n", 1)[0]
            return Path(json.loads(asked)["recipe"]).stem
    raise AssertionError(f"no cell runs on worker {node}")
