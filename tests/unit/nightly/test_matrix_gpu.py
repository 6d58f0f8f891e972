"""evals/nightly-gpu.yaml, the GPU matrix a team starts from: it loads through the matrix's own
model, every cell is valid before anything runs, its models are aliases whose configs ship with
the code (planned offline), and every cell fits one node of 8 of the matrix's GPUs by the same
placement rule the Ray executor applies."""

from pipeline.core.paths import REPO
from pipeline.core.runs import Runs
from pipeline.nightly import matrix, placement

GPU_MATRIX = REPO / "evals" / "nightly-gpu.yaml"


def test_the_gpu_matrix_loads_and_every_cell_is_valid(tmp_path, monkeypatch):
    runs = Runs(tmp_path)  # an overridden recipe is written there
    m, sha = matrix.load(str(GPU_MATRIX))
    cells = matrix.cells(m, runs)
    assert len(sha) == 64 and m.eval_backend == "vllm" and m.gpu == "H100-80GB"
    assert len(cells) == len(m.models) * len(m.recipes) + 2  # two cells added, one overridden
    assert "tiny-llama" not in {c.model for c in cells}
    assert all(c.stages == ("quantize", "eval", "serve") for c in cells)
    overridden = [c for c in cells if c.overrides_sha]
    assert [(c.model, c.name) for c in overridden] == [("llama3.1-8b", "gptq")]
    assert (tmp_path / "nightly" / "recipes").is_dir()
    serve = dict(cells[0].serve)
    assert serve["num_prompts"] >= 2 * max(serve["concurrency"])  # the serve stage's own rule


def test_every_cell_of_the_gpu_matrix_fits_one_node_of_eight(tmp_path, monkeypatch):
    from pipeline.models import aliases

    runs = Runs(tmp_path)
    m, _ = matrix.load(str(GPU_MATRIX))
    node = placement.Node("n" * 16, "10.0.0.1", gpus=8, cpus=64)
    cells = matrix.cells(m, runs)
    assert "llama3-70b" in {c.model for c in cells}  # the largest: the one that might not fit
    for cell in cells:
        assert aliases.resolve(cell.model).source == "alias", cell.model
        held = placement.reserve(cell, [node], m.gpu)
        assert 1 <= held.gpus <= 8, (cell.model, cell.name, held)
