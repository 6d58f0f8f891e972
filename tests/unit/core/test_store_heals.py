"""Issue 53's storage faults, against moto's S3 server: a GC racing a writer that reuses an old
object; a deleted and a corrupted object healed by the next commit; a store that lost its data
committed again from a cached run; two writers of a folder without a manifest of its own keeping
each other's files round after round."""

import threading
import time

import pytest

from pipeline.core import objectstore, store_transport, stored_objects
from pipeline.core.stage import execute
from tests.unit.core.stored_folders import (
    REL,
    opened,
    sha,
    stored_keys,
    stored_manifest,
    tree,
    write,
)
from tests.unit.core.test_stage import Counting


def _fresh_reader(remote: str, tmp_path, name: str) -> dict:
    objectstore.pull(remote, tmp_path / name, REL)
    return tree(tmp_path / name / REL)


def test_a_gc_racing_a_writer_that_reuses_an_old_object_spares_it(remote, monkeypatch, tmp_path):
    """The GC lists an old orphan, then pauses before reading the manifests; a writer redoes the
    same bytes (re-uploading the old object), then pauses before its manifest; the GC goes on.
    It used to delete by its listing's stale time: the manifest then named a missing object."""
    monkeypatch.setattr(objectstore, "GC_MIN_AGE_S", 2.0)  # a writer refreshes what is ≥ 1 s
    writer = tmp_path / "writer"
    redone = {"artifact/model.safetensors": b"r" * 64}
    write(writer, redone, {"v": 1})
    objectstore.push(remote, writer, REL)
    write(writer, {"other.bin": b"o"}, {"v": 2})  # the old commit's object is unnamed now
    objectstore.push(remote, writer, REL)
    time.sleep(3.5)  # S3 times are whole seconds: old for the GC and for the writer
    listed, uploaded, collected = threading.Event(), threading.Event(), threading.Event()
    failed = []
    real_referenced, real_write = objectstore._referenced, store_transport.write_pointer

    def gc_pauses_after_listing(store):
        if threading.current_thread().name == "gc" and not listed.is_set():
            listed.set()
            assert uploaded.wait(60)
        return real_referenced(store)

    def writer_pauses_before_its_manifest(store, rel, body, read):
        uploaded.set()
        assert collected.wait(60)
        return real_write(store, rel, body, read)

    def runs(name, work):
        def target():
            try:
                work()
            except BaseException as e:
                failed.append(e)
            finally:
                if name == "gc":
                    collected.set()

        return threading.Thread(target=target, name=name)

    monkeypatch.setattr(objectstore, "_referenced", gc_pauses_after_listing)
    monkeypatch.setattr(store_transport, "write_pointer", writer_pauses_before_its_manifest)
    deleted = []
    gc = runs("gc", lambda: deleted.append(objectstore.collect_garbage(remote, min_age_s=2.0)))
    gc.start()
    assert listed.wait(60)
    write(writer, redone, {"v": 3})
    push = runs("writer", lambda: objectstore.push(remote, writer, REL))
    push.start()
    for thread in (gc, push):
        thread.join(60)
        assert not thread.is_alive()
    assert not failed
    assert deleted == [(0, 0)]  # its first listing's candidate was re-uploaded since
    assert _fresh_reader(remote, tmp_path, "reader") == {**redone, "manifest.json": {"v": 3}}


def test_a_deleted_and_a_corrupted_object_are_healed_by_the_next_commit(remote, tmp_path):
    """The push used to trust its stored file map: any object that existed was good, a missing
    one was never looked for; `--force` exited 0 and every fresh reader kept failing."""
    writer = tmp_path / "writer"
    files = {"a.bin": b"a" * 100, "b.bin": b"b" * 100, "c.bin": b"c" * 100}
    write(writer, files, {"v": 1})
    objectstore.push(remote, writer, REL)
    store = store_transport.open_store(remote)
    store.fs.rm(store.object(sha(b"a" * 100)))  # lost
    store.fs.pipe_file(store.object(sha(b"b" * 100)), b"x" * 100)  # same size, other bytes
    with pytest.raises(store_transport.StoreError, match="not held by the store"):
        objectstore.pull(remote, tmp_path / "first reader", REL)
    objectstore.push(remote, writer, REL)  # the same process: it checked these objects itself
    assert not store.fs.exists(store.object(sha(b"a" * 100)))
    objectstore.forget_checks()  # what `--force` (and every new process) starts with
    objectstore.push(remote, writer, REL)
    assert _fresh_reader(remote, tmp_path, "reader") == {**files, "manifest.json": {"v": 1}}


def test_a_same_size_corruption_above_the_multipart_threshold_is_healed(
    remote, tmp_path, monkeypatch
):
    """A weight shard stored in parts has no MD5 in its ETag ("…-3"): the commit used to judge it
    by size, so other bytes of the same size were never healed, by a commit or `--force`. The
    thresholds are lowered (S3's smallest part is 5 MiB) so an 11 MiB file is a multipart upload."""
    monkeypatch.setattr(stored_objects, "READ_ONCE_MAX", 2**20)
    monkeypatch.setattr(stored_objects, "PART_BYTES", 5 * 2**20)
    writer = tmp_path / "writer"
    weights = bytes(range(256)) * (11 * 2**12)
    write(writer, {"artifact/model.safetensors": weights}, {"v": 1})
    objectstore.push(remote, writer, REL)
    store = store_transport.open_store(remote)
    key = store.object(sha(weights))
    assert stored_objects.info(store.fs, key)["ETag"].strip('"').endswith("-3")  # in 3 parts
    other = tmp_path / "other.bin"
    other.write_bytes(weights[::-1])  # same size, other bytes, stored in parts too
    store.fs.put_file(str(other), key, chunksize=5 * 2**20)
    objectstore.forget_checks()  # what `--force` (and every new process) starts with
    objectstore.push(remote, writer, REL)
    found = stored_objects.info(store.fs, key)
    assert found["Metadata"] == {"sha256": sha(weights)}
    assert store.fs.cat_file(key) == weights
    assert _fresh_reader(remote, tmp_path, "reader")["artifact/model.safetensors"] == weights


def test_a_store_that_lost_its_data_is_committed_again_from_a_cached_run(
    remote, tmp_path, monkeypatch
):
    """The S3 service lost its data (the bucket recreated empty): the re-run's stage is a hit in
    the local mirror and used to return without committing, leaving the bucket empty."""
    stage = Counting(opened("m", "r"))
    execute(stage)
    store = store_transport.open_store(remote)
    store.fs.rm(store.root, recursive=True)
    assert not [k for k in stored_keys(remote) if "/r/" in k or k.startswith(".objects")]
    objectstore.forget_checks()  # a new process
    again = Counting(opened("m", "r"))
    _, cached = execute(again)
    assert cached and again.calls == []
    assert stored_manifest(remote, "m/r")["stages"]["eval"]["status"] == "done"
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "elsewhere"))
    elsewhere = Counting(opened("m", "r"))
    _, cached = execute(elsewhere)
    assert cached and elsewhere.calls == []  # fetched whole from the store


def test_writers_of_a_folder_without_its_own_manifest_keep_each_others_files(remote, tmp_path):
    """Two nodes write nightly/logs/<run> in turns. A merged commit used to record the other's
    files as synced by this mirror, so its next commit treated them as deleted here."""
    rel, one, two = "nightly/logs/r1", tmp_path / "node1", tmp_path / "node2"
    for i in range(3):
        write(one, {f"A{j}.log": b"a" for j in range(i + 1)}, None, rel)
        objectstore.push(remote, one, rel)
        write(two, {f"B{j}.log": b"b" for j in range(i + 1)}, None, rel)
        objectstore.push(remote, two, rel)
    names = sorted(stored_manifest(remote, rel)["objectstore"]["files"])
    assert names == ["A0.log", "A1.log", "A2.log", "B0.log", "B1.log", "B2.log"]
    (one / rel / "A1.log").unlink()  # a file this mirror had and removed: that is a deletion
    objectstore.push(remote, one, rel)
    assert "A1.log" not in stored_manifest(remote, rel)["objectstore"]["files"]
