"""What a vLLM engine says about itself: KV-cache capacity, weight memory, load times.

Two sources, both tolerant of what a build does not print: the server log (CPU and GPU spell
some lines differently, e.g. `CPU KV cache size` / `GPU KV cache size`; only GPU workers log
`Model loading took X GiB`) and /metrics' `vllm:cache_config_info` labels. vLLM 0.32 gives the
KV pool in bytes there (`kv_cache_memory_bytes`) on the CPU only, from VLLM_CPU_KVCACHE_SPACE; on
a GPU that label is the user's override, None, and the profiled pool is `num_gpu_blocks` blocks
of `block_size` tokens (pipeline/serve/stage.py: kv_pool_bytes).
"""

import re

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

_NUMBER = r"([\d,]+(?:\.\d+)?)"
LOG_PATTERNS = {
    "kv_cache_tokens": rf"\b\w+(?: \+ host)? KV cache size: {_NUMBER} tokens",
    "max_concurrency": rf"Maximum concurrency for {_NUMBER} tokens per request: {_NUMBER}x",
    "weights_gib": rf"Model loading took {_NUMBER} GiB",
    "checkpoint_gib": rf"Checkpoint size: {_NUMBER} GiB",
    "weights_load_seconds": rf"Loading weights took {_NUMBER} seconds",
    "engine_init_seconds": rf"init engine \(profile, create kv cache, warmup model\) took {_NUMBER}",  # noqa: E501
    "available_kv_gib": rf"Available KV cache memory: {_NUMBER} GiB",
}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def from_log(text: str) -> dict:
    """Last occurrence of each known line (a restarted engine logs again)."""
    facts: dict = {}
    for name, pattern in LOG_PATTERNS.items():
        matches = re.findall(pattern, text)
        if not matches:
            continue
        last = matches[-1]
        if name == "max_concurrency":
            facts["max_concurrency_context"] = int(_num(last[0]))
            facts["max_concurrency"] = _num(last[1])
        else:
            value = _num(last if isinstance(last, str) else last[0])
            facts[name] = int(value) if name == "kv_cache_tokens" else value
    return facts


def samples(page: str) -> list[Sample]:
    """vLLM's samples of a Prometheus /metrics page (prometheus_client's parser); none from a
    page it cannot parse: what they give is optional (from_metrics {}, metric None)."""
    try:
        families = list(text_string_to_metric_families(page))
    except ValueError:
        return []
    return [s for f in families for s in f.samples if s.name.startswith("vllm:")]


def from_metrics(found: list[Sample]) -> dict:
    """The `vllm:cache_config_info` labels that matter, typed."""
    info = next((s for s in found if s.name == "vllm:cache_config_info"), None)
    if info is None:
        return {}
    labels = info.labels
    out: dict = {}
    for key, kind in (
        ("kv_cache_size_tokens", int),
        ("kv_cache_memory_bytes", int),
        ("num_gpu_blocks", int),
        ("kv_cache_max_concurrency", float),
        ("block_size", int),
        ("cache_dtype", str),
    ):
        value = labels.get(key)
        if value not in (None, "None", ""):
            out[key] = kind(float(value)) if kind is int else kind(value)
    return out


def metric(found: list[Sample], name: str) -> float | None:
    """Sum of a metric's samples over its labels (one engine: one sample)."""
    values = [s.value for s in found if s.name == name]
    return sum(values) if values else None
