"""The quantized model's serving measurement against the original's: memory and per-concurrency
latency/throughput ratios (quantized / original; for latency, below 1 is faster).

Paired (both served at once, benchmarked alternately): each repeat gives one ratio of two runs
taken back to back; the ratio shown is their median, with their lowest and highest. Against a
cached original (measured at another time) there is one ratio of medians and no spread: the load
difference between the two times is inside it, unmeasured."""

import statistics

from pipeline.serve.results import Comparison, Level, Measurement, Pair

LATENCIES = (
    "ttft_median_ms",
    "ttft_p99_ms",
    "itl_median_ms",
    "itl_p99_ms",
    "tpot_median_ms",
    "e2el_median_ms",
    "e2el_p99_ms",
)
# Below this a latency is not measured, it is an artifact of how tokens arrive: vLLM's CPU
# build streams them in bursts, so a median inter-token gap of ~0.007 ms is two tokens in one
# packet, and a ratio over it (seen: 4,152×) is noise presented as a result.
LATENCY_FLOOR_MS = 1.0
FLOOR_NOTE = f"below the {LATENCY_FLOOR_MS:g} ms resolution floor (tokens arrive in bursts)"


def pair(o: float | None, q: float | None) -> Pair:
    return Pair(original=o, quantized=q, ratio=q / o if q is not None and o else None)


def paired(o: Level, q: Level, metric: str, floor: float | None = None) -> Pair:
    """Median and range of the repeats' ratios; none where a run is below the floor."""
    base = pair(getattr(o, metric), getattr(q, metric))
    runs = list(zip(o.runs, q.runs, strict=False))
    values = [(getattr(a, metric), getattr(b, metric)) for a, b in runs] or [
        (base.original, base.quantized)
    ]
    if any(a is None or b is None for a, b in values):
        return base.model_copy(update={"ratio": None})
    if floor is not None and min(min(a, b) for a, b in values) < floor:
        return base.model_copy(update={"ratio": None, "note": FLOOR_NOTE})
    if any(a == 0 for a, _ in values):
        return base.model_copy(update={"ratio": None})
    return base.model_copy(update=ratio_stats([b / a for a, b in values]))


def ratio_stats(ratios: list[float]) -> dict:
    """A Pair's ratio fields from the repeats' paired ratios: median, range, SE of the mean."""
    se = statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else None
    spread = (min(ratios), max(ratios))
    return {"ratio": statistics.median(ratios), "spread": spread, "ratio_se": se}


def unpaired(o: Level, q: Level, metric: str, floor: float | None = None) -> Pair:
    """Ratio of medians taken at different times: no spread (it would hide the drift)."""
    base = pair(getattr(o, metric), getattr(q, metric))
    lows = [getattr(r, metric) for r in (*o.runs, *q.runs)] + [base.original, base.quantized]
    lows = [v for v in lows if v is not None]
    if floor is not None and lows and min(lows) < floor:
        return base.model_copy(update={"ratio": None, "note": FLOOR_NOTE})
    return base


def per_gpu(p: Pair, gpus_o: int, gpus_q: int) -> Pair:
    """The same throughputs per GPU: what a quantization that needs fewer GPUs buys."""
    scale = gpus_o / gpus_q
    return p.model_copy(
        update={
            "original": None if p.original is None else p.original / gpus_o,
            "quantized": None if p.quantized is None else p.quantized / gpus_q,
            "ratio": None if p.ratio is None else p.ratio * scale,
            "spread": None if p.spread is None else (p.spread[0] * scale, p.spread[1] * scale),
            "ratio_se": None if p.ratio_se is None else p.ratio_se * scale,
        }
    )


def compare(original: Measurement, quantized: Measurement, is_paired: bool) -> Comparison:
    eo, eq = original.engine, quantized.engine
    memory = {
        "checkpoint_bytes": pair(original.checkpoint_bytes, quantized.checkpoint_bytes),
        # GPU workers report the weights' device memory; vLLM's CPU build does not
        "weights_gib": pair(eo.weights_gib, eq.weights_gib),
        "kv_cache_tokens": pair(eo.kv_cache_size_tokens, eq.kv_cache_size_tokens),
        "max_concurrency": pair(eo.kv_cache_max_concurrency, eq.kv_cache_max_concurrency),
        "engine_bytes_after_load": pair(eo.memory_after_load_bytes, eq.memory_after_load_bytes),
        "engine_bytes_after_bench": pair(eo.memory_after_bench_bytes, eq.memory_after_bench_bytes),
    }
    ratio = paired if is_paired else unpaired
    by_level = {lv.concurrency: lv for lv in original.levels}
    levels = []
    for lq in quantized.levels:
        lo = by_level.get(lq.concurrency)
        if lo is None:
            continue
        tok_s = ratio(lo, lq, "output_tok_s")
        row: dict[str, int | Pair] = {"concurrency": lq.concurrency, "output_tok_s": tok_s}
        if original.gpus and quantized.gpus:
            row["output_tok_s_per_gpu"] = per_gpu(tok_s, original.gpus, quantized.gpus)
        row |= {key: ratio(lo, lq, key, LATENCY_FLOOR_MS) for key in LATENCIES}
        levels.append(row)
    repeats = max((len(lv.runs) for lv in quantized.levels), default=0)
    return Comparison.model_validate(
        {"paired": is_paired, "repeats": repeats, "memory": memory, "levels": levels}
    )
