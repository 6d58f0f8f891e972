"""The vllm eval backend sizes each side's engine from the checkpoint on disk: its config's
Geometry and its tensors' bytes. On GPUs the planner reads the Geometry; it was once handed
the raw config, which only a GPU host reached (the CPU engine returns before the planner)."""

import json
import struct

from pipeline.core import environment
from pipeline.engines.vllm import eval_backend
from pipeline.models import aliases
from tests.unit.core.test_devices import standin


def _checkpoint(folder, config: dict, nbytes: int) -> None:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [nbytes // 2], "data_offsets": [0, nbytes]}}
    )
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())


def test_an_8b_originals_engine_on_one_h100(monkeypatch, tmp_path):
    standin(monkeypatch, "h100x1")
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    _checkpoint(tmp_path / "llama3-8b", config, 16 * 2**30)
    engine = eval_backend.engine_for(tmp_path / "llama3-8b", 513, environment.gpus())
    assert engine.tensor_parallel_size == 1 and not engine.enforce_eager
    assert "16.0 GiB of weights" in engine.reason
