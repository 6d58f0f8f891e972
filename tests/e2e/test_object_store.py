"""Run folders in object storage (RUNS_DIR=s3://…, moto's S3 server): quantize on one machine,
eval on another, the eval found cached on a third, and `make advise` reading the measured
quality — each "machine" a fresh local mirror (the previous one deleted)."""

import json
import shutil

import pytest

from tests.conftest import cli

pytestmark = pytest.mark.slow


def test_a_run_folder_in_s3_is_worked_on_from_any_machine(s3, tiny_model, tmp_path, monkeypatch):
    import fsspec

    for key, value in s3.env.items():  # this process looks into the bucket too
        monkeypatch.setenv(key, value)
    from pipeline.core.paths import cache_root, mirror_root

    url = s3.bucket() + "/runs"
    env = {**s3.env, "RUNS_DIR": url}
    mirror = mirror_root(url)
    assert mirror.is_relative_to(cache_root())

    def machine(*args: str):
        shutil.rmtree(mirror, ignore_errors=True)  # nothing local: all from the bucket
        result = cli(*args, runs=tmp_path, env=env, timeout=900)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        return result

    machine("quantize", "--recipe", "fp8")
    fs, root = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    stored = {k.removeprefix(root + "/") for k in fs.find(root)}
    assert "tiny-llama/fp8/manifest.json" in stored
    assert any(k.startswith("tiny-llama/fp8/artifact/") and k.endswith(".safetensors")
               for k in stored)  # fmt: skip
    assert not any("/." in k for k in stored)  # no lock, no staging folder
    evaluated = machine("eval", "--recipe", "fp8", "--backend", "hf", "--json")
    stages = {s["stage"]: s["status"] for s in json.loads(evaluated.stdout)["stages"]}
    assert stages == {"quantize": "cached", "eval": "done"}
    fs.invalidate_cache()
    assert any(k.startswith(f"{root}/tiny-llama/original/reference/") for k in fs.find(root))
    again = machine("eval", "--recipe", "fp8", "--backend", "hf", "--json")
    assert {s["stage"]: s["status"] for s in json.loads(again.stdout)["stages"]} == {
        "quantize": "cached", "eval": "cached"}  # fmt: skip
    advised = machine("advise", "--model", "tiny-llama", "--recipe", "fp8", "--gpu", "host",
                      "--json")  # fmt: skip
    rows = {r["recipe"]: r for r in json.loads(advised.stdout)["rows"]}
    assert rows["fp8"]["quality"]["source"] == "measured"
    assert not any(tmp_path.iterdir())  # the plain runs folder the tests give is never used
