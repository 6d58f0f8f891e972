"""The nightly matrix: the shipped one loads; its serve block is the serve settings' own model,
so a typo or an out-of-range value fails when the matrix loads, with file:line."""

import pytest
import yaml

from pipeline.core.errors import UserError
from pipeline.core.paths import NIGHTLY_MATRIX
from pipeline.core.runs import Runs
from pipeline.nightly import matrix


def _write(tmp_path, **changes) -> str:
    data = yaml.safe_load(NIGHTLY_MATRIX.read_text())
    data.update(changes)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_the_shipped_matrix_loads_and_its_cells_are_valid(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    m, sha = matrix.load(None)
    cells = matrix.cells(m, runs)
    assert [(c.model, c.name) for c in cells] == [("tiny-llama", "fp8"), ("tiny-llama", "gptq")]
    assert len(sha) == 64 and all(c.tensor_parallel_size is None for c in cells)
    serve = dict(cells[0].serve)
    assert serve and all(isinstance(k, str) for k in serve)


def test_a_typo_in_the_serve_block_names_file_line_and_valid_keys(tmp_path):
    path = _write(tmp_path, serve={"concurency": [1, 4]})
    with pytest.raises(UserError) as e:
        matrix.load(path)
    msg = str(e.value)
    assert "m.yaml:" in msg and "unknown key 'serve.concurency'" in msg and "concurrency" in msg


def test_a_cell_serve_value_out_of_range_fails_before_anything_runs(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    path = _write(
        tmp_path, cells=[{"model": "tiny-llama", "recipe": "fp8", "serve": {"num_prompts": 0}}]
    )
    m, _ = matrix.load(path)
    with pytest.raises(UserError, match="num_prompts"):
        matrix.cells(m, runs)


def test_unknown_stage_and_recipe_are_one_line(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    with pytest.raises(UserError, match="unknown stage 'bench'"):
        matrix.load(_write(tmp_path, stages=["quantize", "bench"]))
    m, _ = matrix.load(_write(tmp_path, recipes=["fp8", "nope"]))
    with pytest.raises(UserError, match="unknown recipe 'nope'"):
        matrix.cells(m, runs)


def test_cell_overrides_replace_a_matrix_cell_and_tp_comes_from_serve(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    cells = [
        {"model": "tiny-llama", "recipe": "gptq", "tensor_parallel_size": 2, "stages": ["quantize"]}
    ]
    m, _ = matrix.load(_write(tmp_path, cells=cells))
    by = {c.name: c for c in matrix.cells(m, runs)}
    assert (
        by["gptq"].tensor_parallel_size == 2 and dict(by["gptq"].serve)["tensor_parallel_size"] == 2
    )
    assert by["gptq"].stages == ("quantize",) and by["fp8"].stages == tuple(m.stages)


def test_recipe_overrides_write_a_derived_recipe(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    cells = [
        {
            "model": "tiny-llama",
            "recipe": "fp8",
            "name": "fp8-seed",
            "recipe_overrides": {"calibration.seed": 7},
        }
    ]
    m, _ = matrix.load(_write(tmp_path, cells=cells))
    cell = {c.name: c for c in matrix.cells(m, runs)}["fp8-seed"]
    assert cell.recipe == "fp8" and cell.recipe_arg.endswith(".yaml") and cell.overrides_sha
    assert "seed: 7" in open(cell.recipe_arg).read()
    bad = [{"model": "tiny-llama", "recipe": "fp8", "recipe_overrides": {"nope.seed": 1}}]
    m, _ = matrix.load(_write(tmp_path, cells=bad))
    with pytest.raises(UserError, match="no mapping 'nope'"):
        matrix.cells(m, runs)


def test_an_artifact_cell_imports_the_checkpoint_beside_the_recipes(tmp_path, monkeypatch):
    from pipeline.nightly import cell

    runs = Runs(tmp_path)
    folder = tmp_path / "Llama-GPTQ"
    folder.mkdir()
    path = _write(tmp_path, cells=[{"model": "tiny-llama", "artifact": str(folder)},
                                   {"model": "tiny-llama", "artifact": "org/x-AWQ@v2",
                                    "recipe": "awq", "name": "hub-awq"}])  # fmt: skip
    m, _ = matrix.load(path)
    cells = {c.name: c for c in matrix.cells(m, runs)}
    assert set(cells) == {"fp8", "gptq", "external-Llama-GPTQ", "hub-awq"}
    local = cells["external-Llama-GPTQ"]
    assert local.recipe == "external-Llama-GPTQ"  # its history is kept under its own name
    _, asked = cell.command(local)
    assert (asked.artifact, asked.recipe) == (str(folder), None)
    _, hub = cell.command(cells["hub-awq"])
    assert (hub.artifact, hub.recipe) == ("org/x-AWQ@v2", "awq")


def test_an_artifact_cell_cannot_override_a_recipe(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    path = _write(tmp_path, cells=[{"model": "tiny-llama", "artifact": "org/x",
                                    "recipe_overrides": {"calibration.seed": 1}}])  # fmt: skip
    m, _ = matrix.load(path)
    with pytest.raises(UserError, match="recipe_overrides need a recipe"):
        matrix.cells(m, runs)


def test_an_artifact_cell_with_a_bad_serve_value_names_the_cell(tmp_path, monkeypatch):
    runs = Runs(tmp_path)
    cell = {"model": "tiny-llama", "artifact": "org/x-GPTQ", "serve": {"num_prompts": 0}}
    m, _ = matrix.load(_write(tmp_path, cells=[cell]))
    with pytest.raises(UserError, match=r"cell tiny-llama × external-org--x-GPTQ: serve"):
        matrix.cells(m, runs)
