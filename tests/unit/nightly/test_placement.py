"""Each nightly cell's GPUs on a Ray cluster, against node lists in `ray.nodes()`'s format (the
entries' fields as Ray 2.60 returns them; the GPU counts are the shapes a team's cluster has):
both serve sides side by side where a node holds them, the larger side where not, refused
before the night starts where no node holds even that."""

import pytest

from pipeline.core.errors import UserError
from pipeline.core.runs import Runs
from pipeline.nightly import matrix, placement


def _node(i: int, gpus: int, alive: bool = True) -> dict:
    resources = {"CPU": 16.0, "memory": 1e11, f"node:10.0.0.{i}": 1.0}
    if gpus:
        resources |= {"GPU": float(gpus), "accelerator_type:H100": 1.0}
    return {"NodeID": f"{i:02d}" + "ab" * 27, "Alive": alive,
            "NodeManagerAddress": f"10.0.0.{i}", "Resources": resources}  # fmt: skip


HEAD = _node(1, 0)
TWO_BY_TWO = placement.alive([HEAD, _node(2, 2), _node(3, 2)])
EIGHTS = placement.alive([HEAD, _node(2, 8), _node(3, 8)])


def _cell(tmp_path, monkeypatch, model="tiny-llama", recipe="fp8", **spec):
    runs = Runs(tmp_path)
    stages = spec.pop("stages", ["quantize", "eval", "serve"])
    overrides = [{"model": model, "recipe": recipe, **spec}] if spec else []
    m = matrix.Matrix(models=[model], recipes=[recipe], stages=stages, cells=overrides)
    (cell,) = matrix.cells(m, runs)
    return cell


def test_a_tiny_cell_holds_one_gpu_without_serve_and_two_with(tmp_path, monkeypatch):
    evals = _cell(tmp_path, monkeypatch, stages=["quantize", "eval"])
    assert placement.reserve(evals, TWO_BY_TWO, "H100-80GB").gpus == 1
    served = _cell(tmp_path, monkeypatch)
    found = placement.reserve(served, TWO_BY_TWO, "H100-80GB")
    assert found.gpus == 2 and "side by side: TP 1 + 1" in found.why


def test_llama3_70b_fp8_holds_its_original_and_artifact_side_by_side(tmp_path, monkeypatch):
    """The original on TP 2 (141 GB of bf16), fp8 on 2 too: on one H100 its 67.7 GiB leave
    less KV than one request needs beside vLLM's engine (planning/engine_memory.py) — four GPUs
    of an 8-GPU node; on 2-GPU nodes the larger side's two, the serve sharing them or taking
    turns."""
    cell = _cell(tmp_path, monkeypatch, model="llama3-70b")
    assert placement.sides(cell, "H100-80GB", 8) == (2, 2)
    assert placement.reserve(cell, EIGHTS, "H100-80GB").gpus == 4
    narrow = placement.reserve(cell, TWO_BY_TWO, "H100-80GB")
    assert narrow.gpus == 2 and "share or take turns" in narrow.why


def test_a_cell_no_node_holds_is_refused_with_the_shapes_seen(tmp_path, monkeypatch):
    three = _cell(tmp_path, monkeypatch, stages=["quantize", "eval"], gpus=3)
    with pytest.raises(UserError) as e:
        placement.reserve(three, TWO_BY_TWO, "H100-80GB")
    assert "holds 3 GPUs on one node; no node has them" in str(e.value)
    assert "10.0.0.2/02ababab 2 GPUs" in str(e.value) and "10.0.0.1/01ababab 0 GPUs" in str(e.value)
    huge = _cell(tmp_path, monkeypatch, model="llama3-405b")  # the original needs two nodes
    with pytest.raises(UserError, match="no node has 9 GPUs"):
        placement.reserve(huge, EIGHTS, "H100-80GB")


def test_dead_nodes_do_not_count_and_a_cpu_cluster_runs_cpu_cells(tmp_path, monkeypatch):
    cell = _cell(tmp_path, monkeypatch)
    cpus = placement.alive([HEAD, _node(2, 0), _node(3, 2, alive=False)])
    assert [n.gpus for n in cpus] == [0, 0]
    assert placement.reserve(cell, cpus, "H100-80GB").gpus == 0


def test_a_tp_the_cell_sets_is_both_sides(tmp_path, monkeypatch):
    cell = _cell(tmp_path, monkeypatch, model="llama3-70b", tensor_parallel_size=4)
    assert placement.sides(cell, "H100-80GB", 8) == (4, 4)
    assert placement.reserve(cell, EIGHTS, "H100-80GB").gpus == 8
