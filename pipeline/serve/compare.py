"""The quantized model's serving measurement against the original's: memory and per-concurrency
latency/throughput ratios (quantized / original; for latency, below 1 is faster)."""

from pipeline.serve.results import Comparison, Measurement, Pair

LATENCIES = ("ttft_median_ms", "ttft_p99_ms", "itl_median_ms", "itl_p99_ms", "tpot_median_ms")


def pair(o: float | None, q: float | None) -> Pair:
    return Pair(original=o, quantized=q, ratio=q / o if q is not None and o else None)


def compare(original: Measurement, quantized: Measurement) -> Comparison:
    eo, eq = original.engine, quantized.engine
    memory = {
        "checkpoint_bytes": pair(original.checkpoint_bytes, quantized.checkpoint_bytes),
        # GPU workers report the weights' device memory; vLLM's CPU build does not
        "weights_gib": pair(eo.weights_gib, eq.weights_gib),
        "kv_cache_tokens": pair(eo.kv_cache_size_tokens, eq.kv_cache_size_tokens),
        "max_concurrency": pair(eo.kv_cache_max_concurrency, eq.kv_cache_max_concurrency),
    }
    by_level = {lv.concurrency: lv for lv in original.levels}
    levels = []
    for lq in quantized.levels:
        lo = by_level.get(lq.concurrency)
        if lo is None:
            continue
        row = {
            "concurrency": lq.concurrency,
            "output_tok_s": pair(lo.output_tok_s, lq.output_tok_s),
        }
        row |= {key: pair(getattr(lo, key), getattr(lq, key)) for key in LATENCIES}
        levels.append(row)
    return Comparison.model_validate({"memory": memory, "levels": levels})
