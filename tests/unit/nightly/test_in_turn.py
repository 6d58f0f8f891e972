"""Cells that share a run folder (the same model and recipe, another eval backend) run one after
another on Ray (executors.in_turn), never at once: one folder has one lock and one manifest."""

from pipeline.core.runs import Runs
from pipeline.nightly import executors, matrix


def test_cells_sharing_a_run_folder_queue_in_matrix_order(monkeypatch, tmp_path):
    runs = Runs(tmp_path / "runs")
    m = matrix.Matrix(
        models=["tiny-llama"],
        recipes=["fp8", "gptq"],
        cells=[
            {"model": "tiny-llama", "recipe": "fp8", "name": "fp8-vllm", "eval_backend": "vllm"},
            {"model": "tiny-llama", "recipe": "gptq", "name": "gptq-16",
             "recipe_overrides": {"calibration.num_samples": 16}},
        ],
    )  # fmt: skip
    cells = matrix.cells(m, runs)
    queues = executors.in_turn(cells)
    names = {folder: [c.name for c in queue] for folder, queue in queues.items()}
    assert names[("tiny-llama", "fp8")] == ["fp8", "fp8-vllm"]  # one folder: in turn
    assert names[("tiny-llama", "gptq")] == ["gptq"]
    (overridden,) = [f for f in names if f[1].startswith("gptq-")]  # its own recipe file
    assert names[overridden] == ["gptq-16"]
