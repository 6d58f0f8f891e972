"""What a serve on a GPU host records from vLLM, on recorded GPU outputs (tests/gpu_hosts/
vllm-h100-*: a Llama-3-8B-Instruct engine on one H100, written from vLLM 0.32's sources, since no
GPU runs here): the KV pool vLLM 0.32 gives as blocks on a GPU (its `kv_cache_memory_bytes` label
is None there), the prediction from it, and the CPU's pool as before."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.config import recipe
from pipeline.config.recipe import ServeSettings
from pipeline.core import devices
from pipeline.engines.vllm import engine_facts, server, serving_env
from pipeline.engines.vllm.placement import Placement, SidePlace
from pipeline.planning import geometry, kv_cache
from pipeline.serve.results import EngineFacts, Measurement
from pipeline.serve.stage import ServeStage, kv_pool_bytes

REPO = Path(__file__).resolve().parents[3]
HOSTS = REPO / "tests" / "gpu_hosts"
LLAMA_3_8B = json.loads(
    (REPO / "pipeline/models/configs/meta-llama--Meta-Llama-3-8B-Instruct.json").read_text()
)
# what the recorded engine implies: 32 layers × K and V × 8 KV heads × 128 × 2 bytes (bf16)
PER_TOKEN = 32 * 2 * 8 * 128 * 2
BLOCKS, BLOCK, MAX_LEN = 27_837, 16, 8192
POOL = BLOCKS * BLOCK * PER_TOKEN  # 54.37 GiB, the whole blocks of "Available KV cache memory"


def recorded_metrics(monkeypatch) -> dict[str, str]:
    """The recorded page read by the server's own /metrics reader (its HTTP get replaced)."""
    page = (HOSTS / "vllm-h100-metrics.txt").read_text()
    monkeypatch.setattr(server, "get", lambda url, timeout: page)
    return server.Server.metrics(SimpleNamespace(url="http://127.0.0.1:1"))


def recorded_engine(monkeypatch) -> dict:
    """As measure.py builds a side's engine facts once the server is up."""
    engine = engine_facts.from_log((HOSTS / "vllm-h100-server.log").read_text())
    engine.update(engine_facts.from_metrics(recorded_metrics(monkeypatch)))
    return engine


def test_recorded_gpu_log():
    facts = engine_facts.from_log((HOSTS / "vllm-h100-server.log").read_text())
    assert facts == {
        "kv_cache_tokens": BLOCKS * BLOCK,  # 445,392: full attention keeps every block's tokens
        "max_concurrency_context": MAX_LEN,
        "max_concurrency": 54.37,
        "weights_gib": 14.99,
        "checkpoint_gib": 14.96,
        "weights_load_seconds": 4.87,
        "engine_init_seconds": 52.84,
        "available_kv_gib": 54.37,
    }


def test_recorded_gpu_metrics_give_blocks_not_bytes(monkeypatch):
    info = engine_facts.from_metrics(recorded_metrics(monkeypatch))
    assert info == {
        "kv_cache_size_tokens": BLOCKS * BLOCK,
        "num_gpu_blocks": BLOCKS,
        "kv_cache_max_concurrency": BLOCKS / (MAX_LEN // BLOCK),
        "block_size": BLOCK,
        "cache_dtype": "auto",
    }  # no kv_cache_memory_bytes: "None" on a GPU


def test_gpu_pool_is_the_blocks_in_the_planners_bytes(monkeypatch):
    engine = EngineFacts.model_validate(recorded_engine(monkeypatch))
    pool = kv_pool_bytes(engine, geometry.of(LLAMA_3_8B), "auto")
    assert pool == POOL
    # within the log's rounding of the available memory the blocks came from
    assert 0 <= engine.available_kv_gib * kv_cache.GIB - pool < 0.005 * kv_cache.GIB + PER_TOKEN
    # the prediction counts vLLM's own blocks: what it logged and published
    tokens = kv_cache.kv_tokens(pool, geometry.of(LLAMA_3_8B), "auto", MAX_LEN, BLOCK, 8192)
    assert tokens == engine.kv_cache_tokens == engine.kv_cache_size_tokens
    # blocks are the engine's, the same on every rank: TP and PP do not change the pool
    assert kv_pool_bytes(engine, geometry.of(LLAMA_3_8B), "auto", tp=2, pp=2) == POOL


def test_cpu_pool_is_still_the_published_bytes():
    """vLLM's CPU build publishes VLLM_CPU_KVCACHE_SPACE as kv_cache_memory_bytes (and its
    blocks too): the pool stays the bytes."""
    engine = EngineFacts(kv_cache_memory_bytes=2**30, num_gpu_blocks=8192, block_size=128)
    assert kv_pool_bytes(engine, geometry.of(LLAMA_3_8B), "auto") == 2**30


def test_a_hybrid_pool_comes_from_the_available_memory():
    """A vLLM block spans one KV-cache group's layers when sliding and full layers mix, so the
    blocks do not give the bytes: the log's available memory (one rank's) does."""
    hybrid = {**LLAMA_3_8B, "sliding_window": 4096}
    hybrid["layer_types"] = ["sliding_attention", "full_attention"] * 16
    engine = EngineFacts(num_gpu_blocks=55_674, block_size=16, available_kv_gib=54.37)
    assert kv_pool_bytes(engine, geometry.of(hybrid), "auto") == int(54.37 * kv_cache.GIB)
    # TP 2 splits the 8 KV heads: one rank's bytes are half the planner's (all heads)
    assert kv_pool_bytes(engine, geometry.of(hybrid), "auto", tp=2) == int(2 * 54.37 * kv_cache.GIB)
    assert kv_pool_bytes(engine, geometry.of(hybrid), "auto", pp=2) is None  # one stage's layers
    assert kv_pool_bytes(EngineFacts(block_size=16), geometry.of(LLAMA_3_8B), "auto") is None


@pytest.fixture
def h100_host(monkeypatch):
    """One H100 seen through the stand-in nvidia-smi (tests/gpu_hosts), and vLLM's capability
    probe answering "cuda": the real probe starts the serving env and imports vLLM (slow), and on
    this GPU-less host it would answer "cpu"."""
    monkeypatch.setenv("PATH", f"{HOSTS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPUS", "h100x1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(serving_env, "capabilities", lambda: {"device": "cuda"})
    return devices.seen()


def test_a_serve_of_recorded_gpu_outputs_predicts_kv_tokens_and_memory_bound(
    monkeypatch, h100_host
):
    """ServeStage._predicted and _slo on the recorded engine (both sides: the wiring, not a
    comparison), with the stage's inputs stubbed: a quantize stage's geometry and recipe, the
    settings and a placement on the one H100."""
    settings = ServeSettings()
    measured = Measurement(
        model_dir="/m", served_name="llama-3-8b-original", complete=True, max_model_len=MAX_LEN,
        checkpoint_bytes=16_060_522_496, engine=recorded_engine(monkeypatch),
    )  # fmt: skip
    sides = tuple(
        SidePlace(key, key, tuple(h100_host), 1, 0.45) for key in ("original", "quantized")
    )
    stage = SimpleNamespace(
        quantize=SimpleNamespace(geometry=geometry.of(LLAMA_3_8B), recipe=recipe.load("fp8")),
        settings=settings,
        placement=Placement("shared", sides, "one GPU"),
    )
    predicted = ServeStage._predicted(stage, measured, measured)
    per_request = -(-(settings.input_len + settings.output_len) // BLOCK)  # blocks a request holds
    for side in ("original", "quantized"):
        p, memory_bound = predicted[side]
        assert p.kv_cache_tokens == p.kv_cache_tokens_measured == BLOCKS * BLOCK
        assert memory_bound == BLOCKS // per_request  # 27,837 // 12 = 2,319
    slo = ServeStage._slo(stage, measured, measured, predicted)
    assert slo.original.memory_bound_concurrency == slo.quantized.memory_bound_concurrency == 2319
