"""The manifest: typed, one schema; older run folders migrated once; pruning never the latest."""

import json

from pipeline.core.rundir import Manifest, RunDir, StageEntry


def _entry(fp: str, folder: str, ended: str) -> StageEntry:
    return StageEntry(
        status="done",
        started=ended,
        ended=ended,
        fingerprint=fp,
        inputs={},
        outputs={"results": f"{folder}/{fp[:16]}/results.json"},
    )


def test_schema_1_run_folder_is_migrated_once(tmp_path):
    run = tmp_path / "m" / "r"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "results.json").write_text("{}")
    (run / "eval" / "tokens.pt").write_text("x")
    fp = "f" * 64
    old = {
        "schema": 1,
        "model": {"name": "m", "source": "tiny", "id": None, "revision": None},
        "recipe": {"name": "r", "path": "r.yaml", "sha256": "0"},
        "stages": {
            "eval": {
                "status": "done",
                "started": "t0",
                "ended": "t1",
                "fingerprint": fp,
                "inputs": {},
                "metrics": {},
                "outputs": {"results": "eval/results.json", "tokens": "eval/tokens.pt"},
                "environment": {},
            }
        },
    }
    (run / "manifest.json").write_text(json.dumps(old))
    rundir = RunDir("m", "r", tmp_path)
    m = rundir.manifest()
    entry = m.stages["eval"]
    assert entry.outputs["results"] == f"eval/{fp[:16]}/results.json"
    assert (run / entry.outputs["results"]).read_text() == "{}"
    assert m.results["eval"][fp] == entry
    assert json.loads((run / "manifest.json").read_text())["schema_version"] == 2
    assert rundir.cached("eval", fp) == entry  # the migrated result is reused


def test_prune_keeps_the_latest_and_the_newest_others(tmp_path):
    rundir = RunDir("m", "r", tmp_path)
    entries = [_entry(str(i) * 64, "serve", f"2026-01-0{i}") for i in range(1, 5)]
    for e in entries:
        folder = rundir.path / e.outputs["results"]
        folder.parent.mkdir(parents=True)
        folder.write_text("x" * 1000)
        rundir.update({}, "serve", e)
    rundir.update({}, "serve", entries[0])  # the oldest became the latest again (a cache hit)
    removed = rundir.prune("serve", keep=2)
    kept = set(rundir.manifest().results["serve"])
    assert kept == {entries[0].fingerprint, entries[3].fingerprint}
    assert len(removed) == 2 and not (rundir.path / entries[1].outputs["results"]).exists()


def test_prune_by_size_never_removes_the_latest(tmp_path):
    rundir = RunDir("m", "r", tmp_path)
    for i in (1, 2):
        e = _entry(str(i) * 64, "eval", f"2026-01-0{i}")
        path = rundir.path / e.outputs["results"]
        path.parent.mkdir(parents=True)
        path.write_text("x" * 5000)
        rundir.update({}, "eval", e)
    rundir.prune("eval", keep=10, max_bytes=100)
    assert list(rundir.manifest().results["eval"]) == ["2" * 64]


def test_an_empty_run_dir_has_an_empty_manifest(tmp_path):
    assert RunDir("m", "r", tmp_path).manifest() == Manifest()


def test_clean_cache_command_prunes_every_run_dir(tmp_path, monkeypatch, capsys):
    from pipeline.cli.main import main

    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    for recipe in ("fp8", "gptq"):
        rundir = RunDir("m", recipe, tmp_path)
        for i in (1, 2, 3):
            e = _entry(str(i) * 64, "eval", f"2026-01-0{i}")
            (rundir.path / e.outputs["results"]).parent.mkdir(parents=True)
            (rundir.path / e.outputs["results"]).write_text("{}")
            rundir.update({}, "eval", e)
    assert main(["clean-cache", "--keep", "0"]) == 2
    assert main(["clean-cache", "--keep", "2"]) == 0
    assert "2 older results removed" in capsys.readouterr().out
    for recipe in ("fp8", "gptq"):
        assert set(RunDir("m", recipe, tmp_path).manifest().results["eval"]) == {
            "3" * 64,
            "2" * 64,
        }
