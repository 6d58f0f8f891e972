"""A vLLM server's start-up is allowed the time to read what it loads (serve/server.py): two 70B
servers started together read ~280 GB from one disk, which a flat 900 s cut short."""

from types import SimpleNamespace

import torch
from safetensors.torch import save_file

from pipeline.config.recipe import ServeSettings
from pipeline.engines.vllm import server


def test_the_timeout_grows_with_the_bytes_read_from_one_disk(tmp_path, monkeypatch):
    weights = tmp_path / "model"
    weights.mkdir()
    save_file({"w": torch.zeros(2**20, dtype=torch.bfloat16)}, str(weights / "model.safetensors"))
    (weights / "config.json").write_text("{}")
    launched = SimpleNamespace(argv=["vllm"], env={})
    monkeypatch.setattr(server, "launch", lambda *a, **k: launched)
    one = server.Server(weights, "m", ServeSettings(), tmp_path / "log", 512)
    assert one.timeout == 900 + 2 * 2**20 / server.READ_FLOOR_BPS  # its own checkpoint alone
    one.reading(280 * 10**9)  # two 70B checkpoints at once
    assert round(one.timeout) == 900 + round(280 * 10**9 / (125 * 2**20))  # 3,036 s
