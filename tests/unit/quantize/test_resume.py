"""What a quantize says and records before loading anything when an earlier attempt kept state
(pipeline/quantize/resume.py)."""

from types import SimpleNamespace

from pipeline.config import recipe
from pipeline.core.checkpoints import Checkpoints
from pipeline.quantize import layer_checkpoints, resume

INPUTS = {"model": {"sha": "a"}}


def test_a_run_killed_with_only_the_embeddings_kept_says_it_resumes_and_records_it(
    tmp_path, monkeypatch, capsys
):
    """Killed after the embeddings' subgraph was kept, before any decoder layer: the re-run
    loads that kept state, so it says so and the manifest's `resumed` records it (it said
    nothing and recorded null)."""
    monkeypatch.setattr(layer_checkpoints, "passes", lambda r: 1)  # GPTQ: one calibrated pass
    calibration, geometry = SimpleNamespace(num_samples=8), SimpleNamespace(dtype="bfloat16")
    job = SimpleNamespace(path="oneshot", calibration=calibration, nproc=1,
                          recipe=recipe.load("gptq"), geometry=geometry)  # fmt: skip
    kept = Checkpoints.beside(tmp_path / "artifact", "f1", INPUTS, force=False)
    kept.begin(layer_checkpoints.KIND, 5)  # the embeddings' subgraph, then 4 decoder layers
    kept.keep(layer_checkpoints.name(0, 0), "s0.safetensors", lambda p: p.write_bytes(b"x"), 3.0)
    again = resume.start(job, Checkpoints.beside(tmp_path / "artifact", "f1", INPUTS, False))
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("resuming at layer 1 of 4 (the embeddings' subgraph kept, saves ~3 s)")
    )
    assert resume.record(again) == {
        "at": "layer 1 of 4",
        "kept": 0,
        "units": 1,
        "kept_seconds": 3.0,
    }
