"""Run folders in object storage, against moto's S3 server: a run folder uploaded and fetched
into a fresh mirror whole; an upload killed before its manifest leaves nothing marked done."""

import json

import pytest

from pipeline.core import objectstore
from pipeline.core.rundir import RunDir, StageEntry


@pytest.fixture
def remote(s3, monkeypatch, tmp_path):
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    url = s3.bucket() + "/runs"
    monkeypatch.setenv("RUNS_DIR", url)
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    objectstore._fs.cache_clear()
    return url


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


def test_a_committed_run_folder_is_fetched_whole_by_another_machine(remote, monkeypatch, tmp_path):
    import fsspec

    _done(RunDir("m", "fp8"))
    fs, root = fsspec.core.url_to_fs(remote)
    stored = sorted(k.removeprefix(root + "/") for k in fs.find(root))
    assert stored == ["m/fp8/manifest.json", "m/fp8/quantize/weights.bin"]
    _fresh_mirror(monkeypatch, tmp_path, "elsewhere")
    again = RunDir("m", "fp8")
    assert str(again.path).startswith(str(tmp_path / "elsewhere"))
    assert again.cached("quantize", "f1") is not None
    assert (again.path / "quantize" / "weights.bin").read_bytes() == b"w" * 1000


def test_an_upload_killed_before_the_manifest_leaves_nothing_done(remote, monkeypatch, tmp_path):
    """The manifest goes last: killed there (the upload raising, as a lost connection does),
    the stored folder has the outputs and no manifest saying they are done."""
    fs, _ = objectstore._fs(remote)
    real = fs.put_file

    def dies_at_the_manifest(local, key, *args, **kwargs):
        if key.endswith("/manifest.json"):
            raise ConnectionError("killed")
        return real(local, key, *args, **kwargs)

    monkeypatch.setattr(fs, "put_file", dies_at_the_manifest)
    with pytest.raises(ConnectionError):
        _done(RunDir("m", "gptq"))
    monkeypatch.setattr(fs, "put_file", real)
    _fresh_mirror(monkeypatch, tmp_path, "elsewhere")
    again = RunDir("m", "gptq")
    assert again.cached("quantize", "f1") is None and not again.manifest_path.exists()


def test_without_object_storage_nothing_travels(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    rundir = RunDir("m", "fp8")
    _done(rundir)
    assert json.loads(rundir.manifest_path.read_text())["stages"]["quantize"]["status"] == "done"
    assert objectstore.runs_url() is None
