"""The quantized model's serving measurement against the original's: memory and per-concurrency
latency/throughput ratios (quantized / original; for latency, below 1 is faster)."""

LATENCIES = ("ttft_median_ms", "ttft_p99_ms", "itl_median_ms", "itl_p99_ms", "tpot_median_ms")


def _ratio(q: float | None, o: float | None) -> float | None:
    return q / o if q is not None and o else None


def compare(original: dict, quantized: dict) -> dict:
    eo, eq = original.get("engine", {}), quantized.get("engine", {})
    memory = {
        "checkpoint_bytes": _pair(original["checkpoint_bytes"], quantized["checkpoint_bytes"]),
        # GPU workers report the weights' device memory; vLLM's CPU build does not
        "weights_gib": _pair(eo.get("weights_gib"), eq.get("weights_gib")),
        "kv_cache_tokens": _pair(eo.get("kv_cache_size_tokens"), eq.get("kv_cache_size_tokens")),
        "max_concurrency": _pair(
            eo.get("kv_cache_max_concurrency"), eq.get("kv_cache_max_concurrency")
        ),
    }
    by_level = {lv["concurrency"]: lv for lv in original.get("levels", [])}
    levels = []
    for lq in quantized.get("levels", []):
        lo = by_level.get(lq["concurrency"])
        if lo is None:
            continue
        row = {"concurrency": lq["concurrency"]}
        row["output_tok_s"] = _pair(lo["output_tok_s"], lq["output_tok_s"])
        for key in LATENCIES:
            row[key] = _pair(lo.get(key), lq.get(key))
        levels.append(row)
    return {"memory": memory, "levels": levels}


def _pair(o, q) -> dict:
    return {"original": o, "quantized": q, "ratio": _ratio(q, o)}
