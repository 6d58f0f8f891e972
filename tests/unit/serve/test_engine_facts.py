"""Parsing what vLLM engines print, as CPU and GPU builds spell it (lines copied from real logs;
the GPU ones from vLLM's source, since no GPU runs here)."""

from pipeline.engines.vllm import engine_facts
from pipeline.serve import compare as serve_compare
from pipeline.serve.results import Measurement

CPU_LOG = """\
(Worker pid=21336) INFO 11-30 05:02:06 [weight_utils.py:1108] Filesystem type for checkpoints: \
EXT4. Checkpoint size: 0.01 GiB. Available RAM: 20.66 GiB.
(Worker pid=21336) INFO 11-30 05:02:06 [default_loader.py:501] Loading weights took 0.02 seconds
(EngineCore pid=21287) INFO 11-30 05:02:54 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 \
tokens, Maximum concurrency for 1,024 tokens per request: 512.00x
(EngineCore pid=21287) INFO 11-30 05:02:55 [core.py:402] init engine (profile, create kv cache, \
warmup model) took 47.07 s
"""

GPU_LOG = """\
INFO [gpu_model_runner.py:5150] Model loading took 15.0 GiB memory and 5.312 seconds
INFO [gpu_worker.py:760] Available KV cache memory: 54.32 GiB
INFO [kv_cache_utils.py:2327] GPU KV cache size: 444,976 tokens, Maximum concurrency for 8,192 \
tokens per request: 54.32x
INFO [core.py:402] init engine (profile, create kv cache, warmup model) took 61.5 s \
(compilation: 30.1 s)
"""


def test_cpu_log():
    facts = engine_facts.from_log(CPU_LOG)
    assert facts == {
        "checkpoint_gib": 0.01,
        "weights_load_seconds": 0.02,
        "kv_cache_tokens": 524_288,
        "max_concurrency_context": 1024,
        "max_concurrency": 512.0,
        "engine_init_seconds": 47.07,
    }


def test_gpu_log():
    facts = engine_facts.from_log(GPU_LOG)
    assert facts["weights_gib"] == 15.0 and facts["available_kv_gib"] == 54.32
    assert facts["kv_cache_tokens"] == 444_976 and facts["max_concurrency_context"] == 8192
    assert facts["engine_init_seconds"] == 61.5


def test_missing_lines_are_simply_absent():
    assert engine_facts.from_log("nothing useful\n") == {}


PAGE = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="fp8",kv_cache_memory_bytes="1073741824",\
kv_cache_size_tokens="1048576",kv_cache_max_concurrency="1024.0",num_cpu_blocks="None"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
"""


def test_metrics():
    samples = engine_facts.samples(PAGE)
    assert {s.name for s in samples} == {
        "vllm:cache_config_info",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
    }  # vLLM's only
    info = engine_facts.from_metrics(samples)
    assert info == {
        "kv_cache_size_tokens": 1_048_576,
        "kv_cache_memory_bytes": 2**30,
        "kv_cache_max_concurrency": 1024.0,
        "block_size": 128,
        "cache_dtype": "fp8",
    }
    assert engine_facts.metric(samples, "vllm:kv_cache_usage_perc") == 0.25
    assert engine_facts.metric(samples, "vllm:num_preemptions_total") == 3.0
    assert engine_facts.metric(samples, "vllm:absent") is None
    assert engine_facts.samples("not a metrics page {") == []  # optional facts: none


def test_memory_comparison():
    def side(ckpt, kv, pss):
        engine = {"kv_cache_size_tokens": kv, "kv_cache_max_concurrency": kv / 1024}
        engine |= {"memory_after_load_bytes": pss, "memory_after_bench_bytes": 2 * pss}
        return Measurement(
            model_dir="m", served_name="m", complete=True, max_model_len=512,
            checkpoint_bytes=ckpt, engine=engine,
        )  # fmt: skip

    c = serve_compare.compare(side(100, 1000, 400), side(50, 2000, 300), is_paired=True)
    assert c.memory.checkpoint_bytes.ratio == 0.5
    assert c.memory.kv_cache_tokens.ratio == 2.0
    assert c.memory.engine_bytes_after_load.ratio == 0.75
    assert c.memory.engine_bytes_after_bench.ratio == 0.75
    assert c.memory.weights_gib.ratio is None  # not reported (CPU build)
