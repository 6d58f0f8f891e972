"""Where run folders live (core/runs.py): a value made from RUNS_DIR once, at the entry point;
a folder is all there is, an object store is mirrored under the cache; a RunDir opens no store,
its manifest writes commit through the Runs it was made with, and only there."""

from pathlib import Path

import pytest

from pipeline.core import objectstore
from pipeline.core.rundir import RunDir, StageEntry
from pipeline.core.runs import Runs, key


def _entry() -> StageEntry:
    return StageEntry(status="done", started="2026-12-05T00:00:00+00:00", fingerprint="f",
                      inputs={}, outputs={})  # fmt: skip


def test_runs_dir_a_folder_or_a_store_mirrored_under_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    folder = Runs.from_env()
    assert folder == Runs(tmp_path / "runs") and folder.variable == "RUNS_DIR"
    assert folder.setting == str(tmp_path / "runs")
    monkeypatch.setenv("RUNS_DIR", "s3://bucket/runs")
    store = Runs.from_env()
    assert store.remote == "s3://bucket/runs" and store.setting == "s3://bucket/runs"
    assert store.local.is_relative_to(tmp_path / "cache") and store.variable == "PIPELINE_CACHE"
    assert store.unsynced() == Runs(store.local)  # the mirror, read as fetched
    assert store.folder("m", "fp8") == store.local / key("m", "fp8") == store.local / "m" / "fp8"


def test_a_run_dir_opens_no_store_and_commits_through_its_runs(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(objectstore, "pull", lambda *a, **k: calls.append(("pull", a[2])))
    monkeypatch.setattr(objectstore, "push", lambda *a, **k: calls.append(("push", a[2])))
    runs = Runs(tmp_path / "mirror", "s3://bucket/runs")
    rundir = RunDir("m", "fp8", runs)
    assert rundir.manifest().stages == {} and rundir.cached("quantize", "f") is None
    assert calls == []  # made and read: nothing fetched, nothing sent
    rundir.update({}, "quantize", _entry())
    assert calls == [("push", "m/original"), ("push", "m/fp8")]  # the original, then the run
    runs.pull_run("m", "fp8")
    assert calls[2:] == [("pull", "m/original"), ("pull", "m/fp8")]


@pytest.mark.parametrize("given", ["a folder", "unsynced"])
def test_without_a_store_nothing_syncs(monkeypatch, tmp_path, given):
    monkeypatch.setattr(objectstore, "push", lambda *a, **k: pytest.fail("pushed"))
    monkeypatch.setattr(objectstore, "pull", lambda *a, **k: pytest.fail("pulled"))
    runs = Runs(tmp_path, "s3://bucket/runs").unsynced() if given == "unsynced" else tmp_path
    rundir = RunDir("m", "fp8", runs)
    rundir.update({}, "quantize", _entry())
    assert rundir.stage("quantize").status == "done"
    assert (
        rundir.path == Path(tmp_path) / "m" / "fp8"
        and rundir.original == tmp_path / "m" / "original"
    )
    assert Runs(tmp_path).push("m/fp8") is False and Runs(tmp_path).commit_pruned() == []
