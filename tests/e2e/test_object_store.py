"""Run folders in object storage (RUNS_DIR=s3://…, moto's S3 server): quantize on one machine,
eval on another, the eval found cached on a third, and `make advise` reading the measured
quality without fetching a weight — each "machine" a fresh local mirror (the previous one
deleted). The store holds each folder as its manifest (with the file map) and the content
under .objects/sha256/ (core/objectstore.py; its own tests: tests/unit/core)."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, cli

pytestmark = pytest.mark.slow


def _test_sized_fp8(folder: Path) -> str:
    """fp8 with an eval of 1,024 tokens and no task nor generation: what travels is the point
    here, not the figures (the recipe's own eval is the eval tests')."""
    spec = yaml.safe_load((REPO / "recipes" / "fp8.yaml").read_text())
    spec["eval"] |= {"max_tokens": 1024, "tasks": [], "generation": {"enabled": False}}
    (folder / "fp8.yaml").write_text(yaml.safe_dump(spec))
    return str(folder / "fp8.yaml")


def test_a_run_folder_in_s3_is_worked_on_from_any_machine(
    s3, tiny_model, tmp_path, tmp_path_factory, monkeypatch
):
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

    def files(rel: str) -> dict:
        return json.loads(fs.cat_file(f"{root}/{rel}/manifest.json"))["objectstore"]["files"]

    recipe = _test_sized_fp8(tmp_path_factory.mktemp("recipes"))
    machine("quantize", "--recipe", recipe)
    fs, root = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    stored = {k.removeprefix(root + "/") for k in fs.find(root)}
    assert "tiny-llama/fp8/manifest.json" in stored
    named = files("tiny-llama/fp8")
    assert any(k.startswith("artifact/") and k.endswith(".safetensors") for k in named)
    held = {k.rsplit("/", 1)[-1] for k in stored if k.startswith(".objects/sha256/")}
    assert {m["sha256"] for m in named.values()} <= held  # every named file's content
    assert not any("/." in k for k in stored - {f".objects/sha256/{h[:2]}/{h}" for h in held})
    evaluated = machine("eval", "--recipe", recipe, "--backend", "hf", "--json")
    stages = {s["stage"]: s["status"] for s in json.loads(evaluated.stdout)["stages"]}
    assert stages == {"quantize": "cached", "eval": "done"}
    assert any(k.startswith("reference/") for k in files("tiny-llama/original"))
    again = machine("eval", "--recipe", recipe, "--backend", "hf", "--json")
    assert {s["stage"]: s["status"] for s in json.loads(again.stdout)["stages"]} == {
        "quantize": "cached", "eval": "cached"}  # fmt: skip
    advised = machine("advise", "--model", "tiny-llama", "--recipe", "fp8", "--gpu", "host",
                      "--json")  # fmt: skip
    rows = {r["recipe"]: r for r in json.loads(advised.stdout)["rows"]}
    assert rows["fp8"]["quality"]["source"] == "measured"
    fetched = [p.name for p in mirror.rglob("*") if p.is_file()]
    assert "results.json" in fetched  # the eval's results, not the weights nor the tensors
    assert not [n for n in fetched if n.endswith((".safetensors", ".pt"))], fetched
    assert not any(tmp_path.iterdir())  # the plain runs folder the tests give is never used
