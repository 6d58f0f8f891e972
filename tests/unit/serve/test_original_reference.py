"""`--original cached` on the placement a paired serve gets: the original's reference is kept
per placement (TP, PP, GPU share), and a cached run places both sides as a paired run on these
GPUs would, so after a paired serve on one H100 (each side at 0.45 of it) the cached run finds
that original instead of starting a second one at 0.9. The real placement code on the stand-in
nvidia-smi (tests/gpu_hosts: one H100); no vLLM starts here (the serve stage's `measure` would
start one: a stand-in records whether it was asked to)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.config import recipe
from pipeline.core import devices
from pipeline.core.errors import UserError
from pipeline.core.rundir import RunDir
from pipeline.planning import geometry
from pipeline.serve import stage as serve_stage
from pipeline.serve.plan import planned
from pipeline.serve.results import Measurement
from pipeline.serve.stage import ServeStage
from tests.unit.core.test_devices import standin

CONFIG = Path(serve_stage.__file__).parents[1] / "models" / "configs"
LLAMA_3_8B = json.loads((CONFIG / "meta-llama--Meta-Llama-3-8B-Instruct.json").read_text())


@pytest.fixture
def one_h100(monkeypatch):
    standin(monkeypatch, "h100x1")
    assert len(devices.seen()) == 1


@pytest.fixture
def artifact(tmp_path):
    """What the serve stage reads of its quantize stage: Llama-3-8B × fp8 in tmp_path's runs."""
    return SimpleNamespace(
        recipe=recipe.load("fp8"),
        geometry=geometry.of(LLAMA_3_8B),
        rundir=RunDir("llama3-8b", "fp8", tmp_path),
        model_identity={"hub": "meta-llama/Meta-Llama-3-8B-Instruct", "revision": "r"},
        ref=SimpleNamespace(name="llama3-8b"),
        model_path=Path("/m"),
    )


@pytest.fixture
def servers(monkeypatch):
    """Every side the stage would start a vLLM server for (a stand-in for measure)."""
    started = []

    def measure(sides, start_in_turn=False):
        started.extend(sides)
        out = {}
        for side in sides:
            side.out.mkdir(parents=True, exist_ok=True)
            out[side.key] = measured(side.placement).model_dump(mode="json")
            (side.out / "results.json").write_text(json.dumps(out[side.key]))
        return out

    monkeypatch.setattr(serve_stage.bench, "measure", measure)
    return started


def measured(placement: dict | None) -> Measurement:
    return Measurement(
        model_dir="/m", served_name="llama3-8b-original", complete=True, max_model_len=4096,
        checkpoint_bytes=16_060_522_496, placement=placement,
    )  # fmt: skip


def stage(q, overrides: dict | None = None) -> ServeStage:
    settings, placement = planned(q, overrides)
    return ServeStage(quantize=q, settings=settings, placement=placement)


def paired_run_keeps(q, tmp_path: Path) -> tuple[ServeStage, Measurement]:
    """What a paired serve leaves: its original's folder (results.json, as measure writes it)
    kept as the reference."""
    paired = stage(q)
    original = measured(paired.placement.side("original").record())
    out = tmp_path / "paired-original"
    out.mkdir()
    (out / "results.json").write_text(original.model_dump_json())
    paired.keep_reference(out)
    return paired, original


def test_cached_serve_on_one_gpu_finds_the_paired_runs_original(
    one_h100, artifact, servers, tmp_path
):
    paired, original = paired_run_keeps(artifact, tmp_path)
    assert paired.placement.mode == "shared"
    assert paired.placement.side("original").memory_share == 0.45
    cached = stage(artifact, {"original": "cached"})
    # only the artifact's server starts, where the paired run put it: the same share and TP
    assert cached.placement.mode == "alone"
    for key in ("original", "quantized"):
        side, was = cached.placement.side(key), paired.placement.side(key)
        assert (side.gpus, side.tensor_parallel_size, side.memory_share) == (
            was.gpus, was.tensor_parallel_size, 0.45,
        )  # fmt: skip
    assert cached.settings == paired.settings.model_copy(update={"original": "cached"})
    assert cached.reference_folder() == paired.reference_folder()
    assert cached.reference_folder().name == "tp1-gpu0.45"
    cached.before_work()
    assert cached.original() == (original, True)
    assert servers == []


def test_cached_serve_refuses_another_placements_original_in_one_line(
    one_h100, artifact, servers, tmp_path
):
    """--gpu-memory-utilization 0.8: a paired serve would give the original 0.4 of the H100;
    the one kept has 0.45 (another KV cache): refused, naming both and what to run."""
    paired, _ = paired_run_keeps(artifact, tmp_path)
    cached = stage(artifact, {"original": "cached", "gpu_memory_utilization": 0.8})
    assert cached.placement.side("original").memory_share == 0.4
    for check in (cached.before_work, cached.original):
        with pytest.raises(UserError) as e:
            check()
        message = str(e.value)
        assert "\n" not in message and e.value.exit_code == 2
        kept = paired.reference_folder()
        assert f"measured on GPU 0 at TP 1 with 0.45 of each ({kept})" in message
        assert "places it on GPU 0 at TP 1 with 0.4 of each:" in message
        assert "Run the same command with --original paired once" in message
    assert servers == []
    assert sorted(p.name for p in paired.reference_folder().parent.iterdir()) == [
        ".tp1-gpu0.4.lock", ".tp1-gpu0.45.lock", "tp1-gpu0.45",
    ]  # fmt: skip


def test_cached_serve_with_no_reference_serves_the_original_alone_once(
    one_h100, artifact, servers, tmp_path, capsys
):
    """Nothing kept yet: the original is served alone, at the paired placement's share (so a
    later paired run finds it its own, and the next cached run finds it), and said so."""
    cached = stage(artifact, {"original": "cached"})
    cached.before_work()
    base, was_cached = cached.original()
    assert not was_cached and base == measured(base.placement)
    (side,) = servers
    assert side.key == "original" and [g.index for g in side.gpus] == [0]
    assert side.settings.gpu_memory_utilization == 0.45 and side.settings.kv_cache_dtype == "auto"
    printed = capsys.readouterr().out
    assert "no reference of the original yet: serving it alone first" in printed
    assert "on GPU 0 at TP 1 with 0.45 of each" in printed
    assert cached.original() == (base, True) and len(servers) == 1
    assert stage(artifact).reference_folder() == cached.reference_folder()


def test_on_a_cpu_the_reference_is_the_same_for_any_gpu_share(
    monkeypatch, artifact, servers, tmp_path
):
    """No GPU visible: both sides in RAM, the GPU share meaningless (not in the folder)."""
    standin(monkeypatch, "h100x1", "")  # CUDA_VISIBLE_DEVICES="" hides every GPU
    assert devices.seen() == []
    paired, original = paired_run_keeps(artifact, tmp_path)
    cached = stage(artifact, {"original": "cached", "gpu_memory_utilization": 0.5})
    assert paired.placement.mode == cached.placement.mode == "cpu"
    assert cached.reference_folder() == paired.reference_folder()
    assert cached.reference_folder().name == "tp1-cpu"
    assert cached.original() == (original, True) and servers == []
