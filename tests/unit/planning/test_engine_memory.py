"""vLLM's engine memory per GPU (planning/engine_memory.py) against the recorded Llama-3-8B H100
start-up log, and its activation rule against torch's own accounting of one real-shape decoder
layer (torch's MemTracker: every tensor an op allocates, until it is freed)."""

import re

import pytest

from pipeline.models import aliases
from pipeline.planning import deployment, engine_memory, geometry
from pipeline.planning.gpus import named
from tests.conftest import REPO

GIB = 2**30
LOG = REPO / "tests" / "gpu_hosts" / "vllm-h100-server.log"
H100 = named("H100-80GB")


def _logged() -> dict[str, float]:
    """The log's parts, GiB: gpu_worker.py logs the transient peak + the CUDA-graph estimate as
    "peak activation"; consumed = weights + non-torch."""
    text = LOG.read_text()
    usage = re.search(
        r"Actual usage is ([\d.]+) GiB for consumed memory \(weights \+ non-torch\), ([\d.]+) GiB "
        r"for peak activation, and ([\d.]+) GiB for CUDAGraph memory",
        text,
    )
    weights = re.search(r"Model loading took ([\d.]+) GiB", text)
    estimate = re.search(r"CUDA graph pool memory: [\d.]+ GiB \(actual\), ([\d.]+) GiB", text)
    kv = re.search(r"Available KV cache memory: ([\d.]+) GiB", text)
    assert usage and weights and estimate and kv
    consumed, peak, graphs = map(float, usage.groups())
    return {
        "non_torch": consumed - float(weights[1]),
        "peak_activation": peak,
        "activations": peak - float(estimate[1]),
        "graphs_estimate": float(estimate[1]),
        "graphs": graphs,
        "weights": float(weights[1]),
        "kv": float(kv[1]),
    }


def _engine(alias: str, tp: int = 1) -> engine_memory.EngineMemory:
    g = geometry.of_model(aliases.resolve(alias))
    return deployment.Budget().engine(g, H100, tp, 1, 8192)


def test_the_recorded_8b_h100_logs_parts_within_15_percent():
    """`vllm serve` Llama-3-8B, TP 1, max-model-len 8192 on an H100: 8,192 tokens / 1,024
    seqs profiled; each part within 15% of the log, and the KV it leaves within 2%."""
    log, mine = _logged(), _engine("llama3-8b")
    assert (mine.batch.tokens, mine.batch.seqs) == (8192, 1024)
    assert mine.activations / GIB == pytest.approx(log["activations"], rel=0.15)  # 0.78 / 0.86
    assert mine.non_torch / GIB == pytest.approx(log["non_torch"], rel=0.15)
    for logged in (log["graphs_estimate"], log["graphs"]):  # reserved 0.52; captured 0.49
        assert mine.cuda_graphs / GIB == pytest.approx(logged, rel=0.15)
    peak = (mine.activations + mine.cuda_graphs) / GIB  # as the log says "peak activation"
    assert peak == pytest.approx(log["peak_activation"], rel=0.15)
    usable = engine_memory.usable_bytes(H100.memory_bytes, 0.9) / GIB
    assert usable == pytest.approx(71.27, abs=0.01)  # the log's requested memory
    kv = usable - log["weights"] - mine.total / GIB
    assert kv == pytest.approx(log["kv"], rel=0.02)


def test_the_70b_engine_is_larger_and_fp8_on_one_h100_is_refused():
    """A 70B's activation peak is about twice the 8B's; its FP8 artifact (67.7 GiB) on one
    H100 at 0.9 leaves less KV than one 4,096-token request needs, so the planner takes two
    and says why one is refused."""
    small, large = _engine("llama3-8b"), _engine("llama3-70b")
    assert 1.8 < large.activations / small.activations < 2.2
    g = geometry.of_model(aliases.resolve("llama3-70b"))
    load = deployment.Load(int(67.7 * GIB), "auto", 1, 4096)
    one = deployment.at(g, load, H100, 1)
    assert one.max_users == 0 and one.short and "vLLM refuses it at start-up" in one.short
    found = deployment.fewest(g, load, H100)
    assert found and found.tensor_parallel_size == 2
    assert found.refused == (one.short,)


def test_a_short_sweep_on_an_engine_started_long_is_judged_by_the_engines_length():
    """A serve sweep's requests are short (192 tokens), but its servers start with
    --max-model-len 4096: vLLM refuses an engine that cannot hold one request of that length,
    however many short ones would fit."""
    g = geometry.of_model(aliases.resolve("llama3-70b"))
    short = deployment.Load(int(67.7 * GIB), "auto", 1, 192)
    started_long = deployment.Load(int(67.7 * GIB), "auto", 1, 192, max_model_len=4096)
    assert deployment.at(g, short, H100, 1).short is None
    one = deployment.at(g, started_long, H100, 1)
    assert one.max_users == 0 and "one 4,096-token request needs" in one.short
    assert deployment.fewest(g, started_long, H100).tensor_parallel_size == 2


def test_flat_allowance_and_eval_batch():
    """--overhead-gib replaces the rule; eval's vllm.LLM profiles users × max_model_len."""
    g = geometry.of_model(aliases.resolve("llama3-8b"))
    flat = deployment.Budget(overhead_bytes=2 * GIB).engine(g, H100, 1, 1, 4096)
    assert flat.total == 2 * GIB and flat.batch is None
    llm = deployment.Budget(max_num_seqs=4, offline=True).batch_on(H100, 513)
    assert (llm.tokens, llm.seqs) == (4 * 513, 4)
    assert engine_memory.batch("A100-80GB", 80 * GIB, 4096) == engine_memory.Batch(2048, 256)
    assert engine_memory.batch("B200-180GB", 180 * GIB, 4096, offline=True).tokens == 16_384


@pytest.mark.parametrize(
    "alias, tokens, device",
    [("llama3-8b", 8192, "meta"), ("llama3-70b", 8192, "meta"), ("llama3.2-1b", 512, "cpu")],
)
def test_one_decoder_layers_activations_as_torch_counts_them(alias, tokens, device):
    """transformers' LlamaDecoderLayer at the real shapes holds, at its MLP peak, what vLLM's
    does: the residual, the normed input and 3 × intermediate (gate/up/product; vLLM: gate_up
    and SiluAndMul's output). Full width on the meta device (shapes only, no compute), and
    computed for real on CPU at Llama-3.2-1B's width."""
    torch = pytest.importorskip("torch")
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    shape = _shape(alias)
    config = LlamaConfig(**shape, num_hidden_layers=1, vocab_size=128256)
    config._attn_implementation = "sdpa"
    with torch.device(device):
        layer = LlamaDecoderLayer(config, 0).to(torch.bfloat16).eval()
        rope = LlamaRotaryEmbedding(config)
        x = torch.randn(1, tokens, shape["hidden_size"], dtype=torch.bfloat16)
        positions = torch.arange(tokens)[None]
    with torch.inference_mode():
        cos_sin = rope(x, positions)
        tracker = MemTracker()
        tracker.track_external(layer, x, *cos_sin, positions)
        with tracker:
            out = layer(x, position_embeddings=cos_sin, position_ids=positions)
            del out
        peak = tracker.get_tracker_snapshot("peak")[torch.device(device)]
    measured = next(v for k, v in peak.items() if getattr(k, "value", None) == "Activation")
    g = geometry.of(_config(alias, shape))
    ruled = tokens * max(engine_memory.layer_bytes_per_token(g, 1))
    assert measured > 0 and ruled == measured


def _shape(alias: str) -> dict:
    if alias == "llama3.2-1b":  # Llama-3.2-1B's layer (FACTS.md: served here by vLLM's CPU build)
        return {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 64}  # fmt: skip
    config = aliases.load_config(aliases.resolve(alias))
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
    return {k: config[k] for k in keys} | {"head_dim": 128}


def _config(alias: str, shape: dict) -> dict:
    if alias != "llama3.2-1b":
        return aliases.load_config(aliases.resolve(alias))
    base = aliases.load_config(aliases.resolve("llama3-8b"))
    return base | shape
