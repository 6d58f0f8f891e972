"""Which path a recipe takes, and the memory each path plans, from configs alone."""

import pytest

from pipeline.config import recipe
from pipeline.models import aliases
from pipeline.planning import geometry
from pipeline.quantize import memory, model_free, plan

GIB = 2**30
DATA_FREE = {"fp8", "fp8-block", "w8a16", "w4a16-rtn", "nvfp4a16", "mxfp4"}


def test_data_free_recipes_and_only_they_take_the_model_free_path():
    takes = {name for name in recipe.shipped() if model_free.unsupported(recipe.load(name)) is None}
    assert takes == DATA_FREE
    assert "calibrates on data" in model_free.unsupported(recipe.load("gptq"))
    assert "online" in model_free.unsupported(recipe.load("vllm-fp8"))


def _plan(alias: str, name: str, route: dict, gpus=(), samples=0, seq=0) -> dict:
    config = aliases.load_config(aliases.resolve(alias))
    cal = {"samples": samples, "max_seq_length": seq}
    return plan.build(
        recipe.load(name), geometry.of(config), {"name": alias}, cal, list(gpus), route
    )


def test_model_free_memory_follows_the_largest_shard_not_the_model():
    shards = [5 * 10**9] * 30
    small = _plan("llama3-8b", "fp8", {"path": "model-free", "workers": 1, "shards": shards})
    big = _plan("llama3-70b", "fp8", {"path": "model-free", "workers": 1, "shards": shards})
    two = _plan("llama3-70b", "fp8", {"path": "model-free", "workers": 2, "shards": shards})
    peak = big["memory_bytes"]["cpu_ram_peak_estimate"]
    assert peak == small["memory_bytes"]["cpu_ram_peak_estimate"]
    assert peak == memory.RUNTIME + int(5e9 * memory.SHARD_FACTOR)
    assert two["memory_bytes"]["cpu_ram_peak_estimate"] - peak == int(5e9 * memory.SHARD_FACTOR)
    assert big["pipeline"] == "model-free" and "one safetensors shard at a time" in big["placement"]


def test_hub_shards_are_assumed_and_said_when_not_on_disk():
    found = _plan("llama3-70b", "fp8", {"path": "model-free", "workers": 1, "shards": None})
    assert found["assumed"] == ["shards of 5 GB, as on the hub"]


def test_oneshot_holds_the_model_in_float32_only_to_calibrate_on_a_cpu():
    route = {"path": "oneshot", "workers": 1, "shards": None}
    cpu = _plan("llama3-70b", "fp8", route)["memory_bytes"]
    gptq = _plan("llama3-70b", "gptq", route, samples=512, seq=2048)["memory_bytes"]
    gpu = _plan("llama3-70b", "gptq", route, gpus=["H100 80GB"], samples=512, seq=2048)
    params = cpu["weights_bf16"] // 2
    assert cpu["cpu_ram_terms"]["model (bf16)"] == 2 * params  # data-free: no matmul
    assert gptq["cpu_ram_terms"]["model (float32)"] == 4 * params
    assert gpu["memory_bytes"]["cpu_ram_terms"]["model (bf16)"] == 2 * params
    assert "cast back and compressed (save)" not in cpu["cpu_ram_terms"]  # in place
    assert gptq["cpu_ram_terms"]["cast back and compressed (save)"] == gptq["artifact_estimate"]
    assert cpu["device_peak_estimate"] == cpu["cpu_ram_peak_estimate"]  # the CPU is the device


@pytest.mark.parametrize("on_gpu", [False, True])
def test_calibration_adds_cached_layer_inputs_and_on_cpu_the_gptq_hessians(on_gpu):
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    terms = memory.calibration_bytes(geometry.of(config), 512, 2048, gptq=True, on_gpu=on_gpu)
    width = 2 if on_gpu else 4
    assert terms["cached layer inputs and outputs"] == 2 * 512 * 2048 * 4096 * width
    hessians = (6 * 4096**2 + 14336**2) * 4  # q k v o gate up take 4096 inputs, down 14336
    assert terms.get("GPTQ Hessians of one layer") == (None if on_gpu else hessians)
    assert memory.calibration_bytes(geometry.of(config), 0, 2048, gptq=True, on_gpu=False) == {}
