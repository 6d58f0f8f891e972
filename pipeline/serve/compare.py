"""The quantized model's serving measurement against the original's: memory and per-concurrency
latency/throughput ratios (quantized / original; for latency, below 1 is faster)."""

from pipeline.serve.results import Comparison, Measurement, Pair

LATENCIES = ("ttft_median_ms", "ttft_p99_ms", "itl_median_ms", "itl_p99_ms", "tpot_median_ms")
# Below this a latency is not measured, it is an artifact of how tokens arrive: vLLM's CPU
# build streams them in bursts, so a median inter-token gap of ~0.007 ms is two tokens in one
# packet, and a ratio over it (seen: 4,152×) is noise presented as a result.
LATENCY_FLOOR_MS = 1.0


def pair(o: float | None, q: float | None) -> Pair:
    return Pair(original=o, quantized=q, ratio=q / o if q is not None and o else None)


def latency_pair(o: float | None, q: float | None) -> Pair:
    """A ratio only when both sides are above the resolution floor, else why not."""
    if o is not None and q is not None and min(o, q) < LATENCY_FLOOR_MS:
        note = f"below the {LATENCY_FLOOR_MS:g} ms resolution floor (tokens arrive in bursts)"
        return Pair(original=o, quantized=q, ratio=None, note=note)
    return pair(o, q)


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
        row |= {key: latency_pair(getattr(lo, key), getattr(lq, key)) for key in LATENCIES}
        levels.append(row)
    return Comparison.model_validate({"memory": memory, "levels": levels})
