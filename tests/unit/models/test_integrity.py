"""Broken model folders are refused before anything is created (pipeline/models/integrity.py):
one line, exit 2, no run folder."""

import json

import pytest
import torch
from safetensors.torch import save_file

from pipeline.models.tiny import spec
from tests.conftest import cli


@pytest.fixture
def model(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(spec.CONFIG))
    save_file({"a": torch.zeros(4, 4), "b": torch.ones(8)}, folder / "model.safetensors")
    return folder


def _refused(folder, runs) -> str:
    result = cli("quantize", "--model", str(folder), "--recipe", "fp8", "--dry-run", runs=runs)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert not runs.exists()  # nothing created
    return line


def _truncate(model):
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[:-10])


def _pad(model):
    with (model / "model.safetensors").open("ab") as f:
        f.write(b"\0" * 7)


def _missing_shard(model):
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))


BROKEN = {
    "truncated": (_truncate, "is truncated: its header describes"),
    "padded": (_pad, "7 bytes beyond its tensors"),
    "no weights": (lambda m: (m / "model.safetensors").unlink(), "has no *.safetensors weights"),
    "missing shard": (_missing_shard, "1 of 2 shards named in model.safetensors.index.json"),
    "bad json": (lambda m: (m / "config.json").write_text("{oops"), "does not parse as JSON"),
    "no model_type": (lambda m: (m / "config.json").write_text("{}"), "names no model_type"),
    "not utf-8": (lambda m: (m / "config.json").write_bytes(b"\xff\xfe{"), "is not UTF-8"),
    "header": (lambda m: (m / "model.safetensors").write_bytes(b"\x10" * 64), "not a safetensors"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_model_folder_is_one_line_exit_2(model, tmp_path, case):
    breaks, message = BROKEN[case]
    breaks(model)
    line = _refused(model, tmp_path / "runs")
    assert message in line and str(model) in line, line


def test_a_whole_folder_passes(model, tmp_path):
    result = cli("quantize", "--model", str(model), "--recipe", "fp8", "--dry-run",
                 runs=tmp_path / "runs")  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_a_runs_dir_that_is_a_file_is_refused_before_any_work(model, tmp_path):
    runs = tmp_path / "runs"
    runs.write_text("not a folder")
    result = cli("quantize", "--model", str(model), "--recipe", "fp8", runs=runs)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"cannot create run folder {runs}/my-model/fp8: {runs} is not a folder" in line
