"""Run folders in object storage, against moto's S3 server: stored by content (objects named by
their sha256, the manifest the one pointer), so a same-size rewrite is new content, a reader
during a commit gets one whole version, a fresh mirror holds only what the manifest names;
metadata-only pulls; pruning reaches the store and its GC; deadlines on a stalled endpoint;
RUNS_DIR mistakes as one line with their exit code."""

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from pipeline.core import objectstore, store_transport
from pipeline.core.rundir import RunDir, StageEntry
from pipeline.core.runs import Runs
from tests.conftest import REPO, cli
from tests.unit.core.stored_folders import (
    REL,
    opened,
    sha,
    stored_keys,
    stored_manifest,
    tree,
    write,
)


def _done(rundir: RunDir) -> None:
    out = rundir.path / "quantize"
    out.mkdir(parents=True)
    (out / "weights.bin").write_bytes(b"w" * 1000)
    (rundir.path / ".lock").touch()  # hidden: never travels
    (rundir.path / ".quantize.partial-1").mkdir()
    entry = StageEntry(status="done", started="2026-12-03T00:00:00+00:00", fingerprint="f1",
                       inputs={}, outputs={"artifact": "quantize"})  # fmt: skip
    rundir.update({}, "quantize", entry)


def _fresh_mirror(monkeypatch, tmp_path, name: str) -> None:
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / name))


def _clean_cache(tmp_path: Path, env: dict, *args: str):
    """The cheapest command that reads RUNS_DIR; it imports no model library, so a fresh
    process (0.5 s) beats starting the test zygote."""
    return cli("clean-cache", *args, runs=tmp_path / "unused", env=env, timeout=300, fresh=True)


def test_a_committed_run_folder_is_fetched_whole_by_another_machine(remote, monkeypatch, tmp_path):
    _done(opened("m", "fp8"))
    keys = stored_keys(remote)
    assert keys[-1] == "m/fp8/manifest.json"  # the pointer; the content under .objects
    assert [k.split("/")[:2] for k in keys[:-1]] == [[".objects", "sha256"]]
    files = stored_manifest(remote)["objectstore"]["files"]
    assert list(files) == ["quantize/weights.bin"] and files["quantize/weights.bin"]["size"] == 1000
    _fresh_mirror(monkeypatch, tmp_path, "elsewhere")
    again = opened("m", "fp8")
    assert str(again.path).startswith(str(tmp_path / "elsewhere"))
    assert again.cached("quantize", "f1") is not None
    assert (again.path / "quantize" / "weights.bin").read_bytes() == b"w" * 1000
    assert "objectstore" not in json.loads(again.manifest_path.read_text())  # the stage's own


def test_an_upload_killed_before_the_manifest_leaves_nothing_done(remote, monkeypatch, tmp_path):
    """The manifest goes last: killed there (the upload raising, as a lost connection does),
    the store has the content and no manifest saying it is done."""
    fs = store_transport.open_store(remote).fs
    real = fs.pipe_file

    def dies_at_the_manifest(key, *args, **kwargs):
        if key.endswith("/manifest.json"):
            raise ConnectionError("killed")
        return real(key, *args, **kwargs)

    monkeypatch.setattr(fs, "pipe_file", dies_at_the_manifest)
    with pytest.raises(store_transport.StoreError, match="committing m/gptq failed"):
        _done(opened("m", "gptq"))
    monkeypatch.setattr(fs, "pipe_file", real)
    _fresh_mirror(monkeypatch, tmp_path, "elsewhere")
    again = opened("m", "gptq")
    assert again.cached("quantize", "f1") is None and not again.manifest_path.exists()


def test_without_object_storage_nothing_travels(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    rundir = opened("m", "fp8")
    _done(rundir)
    assert json.loads(rundir.manifest_path.read_text())["stages"]["quantize"]["status"] == "done"
    assert Runs.from_env().remote is None


def test_a_same_size_rewrite_reaches_every_mirror(remote, tmp_path):
    """Issue 45: `--num-samples 8` then `16` rewrote model.safetensors in place at the same size;
    the bucket kept the 8-sample file under the 16-sample manifest."""
    writer, held = tmp_path / "writer", tmp_path / "held"
    v1 = {"a.json": b"{}", "artifact/model.safetensors": b"8" * 4096}
    write(writer, v1, {"samples": 8})
    objectstore.push(remote, writer, REL)
    objectstore.pull(remote, held, REL)
    assert tree(held / REL) == {**v1, "manifest.json": {"samples": 8}}
    v2 = {**v1, "artifact/model.safetensors": b"6" * 4096}  # same size, other bytes
    write(writer, v2, {"samples": 16})
    objectstore.push(remote, writer, REL)
    for mirror in (tmp_path / "fresh", held):
        objectstore.pull(remote, mirror, REL)
        assert tree(mirror / REL) == {**v2, "manifest.json": {"samples": 16}}
    objects = [k for k in stored_keys(remote) if k.startswith(".objects/")]
    assert len(objects) == 3  # a.json, and both weights: content is never overwritten


def test_a_file_written_between_the_scan_and_its_upload_is_stored_as_its_hash_says(
    remote, monkeypatch, tmp_path
):
    """A nightly cell commits the logs folder while a sibling cell still appends its log: the
    commit scanned the log, then uploaded longer bytes under the shorter content's hash, and the
    driver's pull refused the object ("holds other bytes"). The commit scans again instead."""
    writer = tmp_path / "writer"
    log = writer / REL / "other-cell.log"
    write(writer, {"this-cell.log": b"done\n", "other-cell.log": b"step 1\n"}, None)
    scan = objectstore._scan

    def appended_after(local, record):
        found = scan(local, record)
        with log.open("ab") as f:  # the other cell's next line, once per scan
            f.write(b"step n\n")
        return found

    monkeypatch.setattr(objectstore, "_scan", appended_after)
    assert objectstore.push(remote, writer, REL)
    reader = tmp_path / "reader"
    objectstore.pull(remote, reader, REL)  # refused an object that is not its hash before
    pulled = (reader / REL / "other-cell.log").read_bytes()
    assert pulled.startswith(b"step 1\nstep n\n") and log.read_bytes().startswith(pulled)


def test_a_reader_during_a_commit_gets_one_whole_version(remote, monkeypatch, tmp_path):
    """The reader pauses between its manifest and its objects while a writer commits: it still
    gets exactly the version whose manifest it read; its next pull, exactly the next one."""
    writer, reader_mirror = tmp_path / "writer", tmp_path / "reader"
    v1 = {"a.bin": b"a" * 512, "b.bin": b"b" * 512}
    v2 = {"b.bin": b"B" * 512, "c.bin": b"c" * 100}  # b rewritten, a gone, c new
    write(writer, v1, {"version": 1})
    objectstore.push(remote, writer, REL)
    read, committed, failed = threading.Event(), threading.Event(), []
    real = store_transport.read_pointer

    def pausing(store, rel):
        raw = real(store, rel)
        if threading.current_thread().name == "reader":
            read.set()
            assert committed.wait(60)
        return raw

    def reads():
        try:
            objectstore.pull(remote, reader_mirror, REL)
        except BaseException as e:
            failed.append(e)

    monkeypatch.setattr(store_transport, "read_pointer", pausing)
    reader = threading.Thread(target=reads, name="reader")
    reader.start()
    assert read.wait(60)
    write(writer, v2, {"version": 2})
    objectstore.push(remote, writer, REL)
    committed.set()
    reader.join(60)
    assert not failed and not reader.is_alive()
    assert tree(reader_mirror / REL) == {**v1, "manifest.json": {"version": 1}}
    objectstore.pull(remote, reader_mirror, REL)
    assert tree(reader_mirror / REL) == {**v2, "manifest.json": {"version": 2}}


def test_racing_commits_of_a_folder_without_manifest_keep_every_addition(
    remote, monkeypatch, tmp_path
):
    """The nightly's cells each commit nightly/logs/<run> with their own log, from their own
    node: a commit that read the folder before another's landed loses the race (S3's
    If-Match), reads again and merges; no log is lost."""
    rel = "nightly/logs/r1"
    first, second = tmp_path / "node1", tmp_path / "node2"
    write(first, {"a.log": b"a"}, None, rel)
    write(second, {"b.log": b"b"}, None, rel)
    read, landed, failed = threading.Event(), threading.Event(), []
    real = store_transport.read_pointer

    def slow_first_read(store, at):
        found = real(store, at)
        if threading.current_thread().name == "node1" and not read.is_set():
            read.set()
            assert landed.wait(60)
        return found

    def commits():
        try:
            objectstore.push(remote, first, rel)
        except BaseException as e:
            failed.append(e)

    monkeypatch.setattr(store_transport, "read_pointer", slow_first_read)
    node1 = threading.Thread(target=commits, name="node1")
    node1.start()
    assert read.wait(60)
    objectstore.push(remote, second, rel)
    landed.set()
    node1.join(60)
    assert not failed and not node1.is_alive()
    assert sorted(stored_manifest(remote, rel)["objectstore"]["files"]) == ["a.log", "b.log"]
    objectstore.pull(remote, tmp_path / "driver", rel)
    assert tree(tmp_path / "driver" / rel) == {"a.log": b"a", "b.log": b"b"}


def test_a_mirror_holds_only_what_the_manifest_names(remote, tmp_path):
    """A pruned file leaves the next manifest; a fresh mirror never shows it (its object is
    still stored, unreferenced), a mirror that held it drops it, and what a mirror wrote itself
    and never committed stays."""
    writer, held = tmp_path / "writer", tmp_path / "held"
    v1 = {"artifact/model.safetensors": b"w" * 300, "eval/old/results.json": b"1"}
    write(writer, v1, {"stages": 1})
    objectstore.push(remote, writer, REL)
    objectstore.pull(remote, held, REL)
    (held / REL / "eval" / "mine.json").write_bytes(b"local work")
    v2 = {"artifact/model.safetensors": b"w" * 300}  # eval/old pruned
    write(writer, v2, {"stages": 2})
    objectstore.push(remote, writer, REL)
    assert list(stored_manifest(remote)["objectstore"]["files"]) == ["artifact/model.safetensors"]
    objectstore.pull(remote, tmp_path / "fresh", REL)
    assert tree(tmp_path / "fresh" / REL) == {**v2, "manifest.json": {"stages": 2}}
    objectstore.pull(remote, held, REL)
    assert tree(held / REL) == {**v2, "eval/mine.json": b"local work",
                                 "manifest.json": {"stages": 2}}  # fmt: skip
    assert not (held / REL / "eval" / "old").exists()


def test_a_metadata_only_pull_leaves_weights_stored_and_prunes_reach_the_store(remote, tmp_path):
    """weights=False (advise, clean-cache): manifests and results, no artifact, no tensors.
    A commit from that mirror keeps the weights it never fetched, and drops a pruned folder
    with its tensors."""
    writer, reader = tmp_path / "writer", tmp_path / "reader"
    files = {"artifact/model.safetensors": b"w" * 300, "artifact/config.json": b"{}",
             "eval/a/results.json": b"a", "eval/a/tokens.pt": b"t" * 50,
             "eval/b/results.json": b"b", "eval/b/tokens.pt": b"u" * 50}  # fmt: skip
    write(writer, files, {"stages": 2})
    objectstore.push(remote, writer, REL)
    objectstore.pull(remote, reader, REL, weights=False)
    assert tree(reader / REL) == {"eval/a/results.json": b"a", "eval/b/results.json": b"b",
                                   "manifest.json": {"stages": 2}}  # fmt: skip
    assert not (reader / REL / "artifact").exists()  # no folder that looks like an artifact
    for path in (reader / REL / "eval" / "a").iterdir():  # what RunDir.prune does
        path.unlink()
    (reader / REL / "eval" / "a").rmdir()
    (reader / REL / "manifest.json").write_text(json.dumps({"stages": 1}))
    assert objectstore.push(remote, reader, REL)
    assert sorted(stored_manifest(remote)["objectstore"]["files"]) == [
        "artifact/config.json", "artifact/model.safetensors", "eval/b/results.json",
        "eval/b/tokens.pt"]  # fmt: skip
    objectstore.pull(remote, tmp_path / "fresh", REL)
    kept = {k: v for k, v in files.items() if not k.startswith("eval/a/")}
    assert tree(tmp_path / "fresh" / REL) == {**kept, "manifest.json": {"stages": 1}}


def test_garbage_collection_spares_what_is_named_or_young(remote, tmp_path):
    writer = tmp_path / "writer"
    write(writer, {"old.bin": b"o" * 10, "kept.bin": b"k" * 10}, {"v": 1})
    objectstore.push(remote, writer, REL)
    write(writer, {"kept.bin": b"k" * 10}, {"v": 2})  # old.bin: no manifest names it now
    objectstore.push(remote, writer, REL)
    time.sleep(3.5)  # S3 times are whole seconds
    store = store_transport.open_store(remote)
    young = sha(b"young")  # a writer's upload whose manifest is not written yet
    store.fs.pipe_file(store.object(young), b"young")
    assert objectstore.collect_garbage(remote, min_age_s=2.0) == (1, 10)
    left = {k.rsplit("/", 1)[-1] for k in stored_keys(remote) if k.startswith(".objects/")}
    assert left == {sha(b"k" * 10), young}
    objectstore.pull(remote, tmp_path / "fresh", REL)  # what is named is whole
    assert tree(tmp_path / "fresh" / REL) == {
        "kept.bin": b"k" * 10,
        "manifest.json": {"v": 2},
    }


def test_clean_cache_prunes_the_store(remote, monkeypatch, tmp_path):
    """`make clean-cache --keep 1` on a fresh machine: the store's manifest keeps the latest
    eval, its file map drops the older one's files and keeps the artifact it never fetched."""
    rundir = opened("m", "fp8")
    _done(rundir)
    for i, fingerprint in enumerate(["e1" * 8, "e2" * 8]):
        folder = rundir.result_folder("eval", fingerprint)
        folder.mkdir(parents=True)
        (folder / "results.json").write_text("{}")
        (folder / "tokens.pt").write_bytes(bytes([i]) * 64)
        results = f"eval/{fingerprint[:16]}/results.json"
        entry = StageEntry(status="done", started=f"2026-12-03T0{i}:00:00+00:00", inputs={},
                           fingerprint=fingerprint, ended=f"2026-12-03T0{i}:30:00+00:00",
                           outputs={"results": results})  # fmt: skip
        rundir.update({}, "eval", entry)
    assert len(stored_manifest(remote)["objectstore"]["files"]) == 5
    env = {"RUNS_DIR": remote, "PIPELINE_CACHE": str(tmp_path / "elsewhere")}
    result = _clean_cache(tmp_path, env, "--keep", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 older results removed" in result.stdout
    assert "0 unreferenced objects deleted" in result.stdout  # young: kept a day
    stored = stored_manifest(remote)
    assert list(stored["results"]["eval"]) == ["e2" * 8]
    assert sorted(stored["objectstore"]["files"]) == [
        "eval/e2e2e2e2e2e2e2e2/results.json", "eval/e2e2e2e2e2e2e2e2/tokens.pt",
        "quantize/weights.bin"]  # fmt: skip
    assert not list((tmp_path / "elsewhere").rglob("weights.bin"))  # results, not weights


def test_a_stalled_endpoint_fails_within_the_deadline_in_one_line(s3, monkeypatch):
    """An endpoint that accepts TCP and never answers (botocore's defaults: ~418 s)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []

    def accepts():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accepts, daemon=True).start()
    fast = {
        "connect_timeout": 1,
        "read_timeout": 2,
        "retries": {"total_max_attempts": 2, "mode": "standard"},
    }
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setenv("RUNS_DIR", "s3://stalled/runs")
    monkeypatch.setattr(store_transport, "S3_TRANSPORT", fast)
    store_transport.open_store.cache_clear()
    started = time.monotonic()
    try:
        with pytest.raises(store_transport.StoreError) as failed:
            Runs.from_env().pull(REL)
    finally:
        listener.close()
        store_transport.open_store.cache_clear()
    took = time.monotonic() - started
    assert fast["read_timeout"] <= took <= store_transport.deadline_s(fast) + 3
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith("RUNS_DIR=s3://stalled/runs: reaching the bucket failed after")
    assert "Timeout" in message
    assert store_transport.deadline_s() < 240  # the stated bound of the real constant, not 418 s


@pytest.mark.parametrize(
    ("value", "code", "says"),
    [
        ("s3:/bucket/x", 2, "RUNS_DIR=s3:/bucket/x: not a URL (s3://bucket/prefix)"),
        ("S3://bucket/x", 2, "RUNS_DIR=S3://bucket/x: the scheme is spelled s3:// (lowercase)"),
        ("gs://bucket/x", 2, "RUNS_DIR=gs://bucket/x: gs:// is not supported for run folders"),
        (
            "s3://no-such-bucket/x",
            2,
            "RUNS_DIR=s3://no-such-bucket/x: bucket no-such-bucket does not exist",
        ),  # fmt: skip
    ],
)
def test_runs_dir_mistakes_are_one_line(s3, tmp_path, value, code, says):
    result = _clean_cache(tmp_path, {**s3.env, "RUNS_DIR": value, "PIPELINE_CACHE": str(tmp_path)})
    assert result.returncode == code, result.stderr
    assert result.stderr.startswith(f"error: {says}") and result.stderr.count("\n") == 1
    assert not (tmp_path / "unused").exists() and not (REPO / "s3:").exists()


def test_credentials_the_bucket_refuses_are_one_line(s3, monkeypatch, tmp_path):
    import moto.settings

    url = s3.bucket()
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks keys
    env = {**s3.env, "RUNS_DIR": url + "/x", "PIPELINE_CACHE": str(tmp_path)}
    result = _clean_cache(tmp_path, env)
    assert result.returncode == 2, result.stderr
    bucket = url.removeprefix("s3://")
    assert result.stderr.startswith(f"error: RUNS_DIR={url}/x: bucket {bucket} refuses these "
                                    "credentials")  # fmt: skip
    assert result.stderr.count("\n") == 1


def test_a_manifest_from_before_content_addressing_is_said_and_ignored(remote, capsys, tmp_path):
    store = store_transport.open_store(remote)
    store.fs.pipe_file(store.pointer(REL), b'{"stages": {}}')
    store.fs.pipe_file(f"{store.key(REL)}/artifact/model.safetensors", b"old")
    objectstore.pull(remote, tmp_path / "m", REL)
    assert not (tmp_path / "m" / REL).exists()
    err = capsys.readouterr().err
    assert f"{REL}/manifest.json predates content addressing" in err
    assert "1 files under m/fp8 were stored before content addressing" in err


def test_a_commit_skips_files_in_flight_and_files_gone_since_listed(tmp_path, monkeypatch):
    """Two cells of one model on one host share its mirror's reference folder: the other's
    temporary file (hidden) is never committed, and one removed between the listing and its
    hash is left out, not a failed commit (FileNotFoundError)."""
    from pipeline.core import objectstore

    local = tmp_path / "original"
    local.mkdir()
    for name in ("calibration.pt", ".heldout.pt.tmp-42", "heldout.pt"):
        (local / name).write_text(name)
    hashed = objectstore.sha256_file

    def vanishing(path):
        if path.name == "heldout.pt":
            path.unlink()  # renamed away by the other process, as it were
        return hashed(path)

    monkeypatch.setattr(objectstore, "sha256_file", vanishing)
    found = objectstore._scan(local, objectstore._Record.load(local))
    assert set(found) == {"calibration.pt"}
