"""What a serve measurement costs and how close it came to the hardware's bound.

Cost: $ per 1M output tokens = price of an hour × GPUs (or the host) / (measured output
tokens/s × 3600) × 1e6, per concurrency level and at each side's SLO capacity; the price is the
shipped table's (pipeline/perf/prices.toml) for the GPU type this host has, or a CPU host's.
Paired runs give a ratio per repeat (GPUs_q / tok_q) / (GPUs_o / tok_o), with its range and SE.

Bound: each level's decode step of `concurrency` sequences at input + output / 2 cached tokens,
on this hardware (a known GPU type, or this CPU host's measured rates), against the measured
median time per output token.
"""

from pipeline.core import environment
from pipeline.perf import bound, host, prices, timing
from pipeline.planning import gpus
from pipeline.planning.geometry import Geometry
from pipeline.serve.compare import pair, ratio_stats
from pipeline.serve.results import (
    BoundCheck,
    BoundLevel,
    Cost,
    CostLevel,
    Level,
    Measurement,
    Pair,
    Slo,
)

CPU_HOST = "CPU host"


def hardware() -> tuple[gpus.Hardware | None, prices.Price | None, str]:
    """This host's hardware for the bound, its price, and its name in the results."""

    found = environment.gpus()
    hw = host.here()
    if not found:
        return hw, prices.host(), CPU_HOST
    if hw is None:
        return None, None, found[0]
    return hw, prices.gpu(hw.name), hw.name


def cost(
    original: Measurement, quantized: Measurement, slo: Slo, is_paired: bool, price, name: str
) -> Cost | None:
    if price is None:
        return None
    units = {"original": original.gpus or 1, "quantized": quantized.gpus or 1}
    by_level = {lv.concurrency: lv for lv in original.levels}
    levels = [
        CostLevel(
            concurrency=lq.concurrency,
            usd_per_million_output_tokens=_level_pair(
                by_level[lq.concurrency], lq, units, price, is_paired
            ),  # fmt: skip
        )
        for lq in quantized.levels
        if lq.concurrency in by_level
    ]
    at_capacity = pair(
        _at(original, slo.original.capacity, units["original"], price),
        _at(quantized, slo.quantized.capacity, units["quantized"], price),
    )
    return Cost(
        hardware=name,
        usd_per_hour=price.usd_per_hour,
        price_source=price.source,
        units=units,
        levels=levels,
        at_slo_capacity=at_capacity,
    )


def _level_pair(o: Level, q: Level, units: dict, price, is_paired: bool) -> Pair:
    base = pair(
        price.per_million(units["original"], o.output_tok_s),
        price.per_million(units["quantized"], q.output_tok_s),
    )
    runs = list(zip(o.runs, q.runs, strict=False)) if is_paired else []
    if not runs or any(not a.output_tok_s or not b.output_tok_s for a, b in runs):
        return base
    ratios = [
        (units["quantized"] / b.output_tok_s) / (units["original"] / a.output_tok_s)
        for a, b in runs
    ]
    return base.model_copy(update=ratio_stats(ratios))


def _at(side: Measurement, capacity: int | None, units: int, price) -> float | None:
    level = next((lv for lv in side.levels if lv.concurrency == capacity), None)
    return price.per_million(units, level.output_tok_s) if level else None


def against_bound(
    g: Geometry, recipe, original: Measurement, quantized: Measurement, settings, hw
) -> BoundCheck | None:
    if hw is None:
        return None
    context = settings.input_len + settings.output_len // 2
    sides = {
        "original": (original, bound.footprint(g), "auto"),
        "quantized": (quantized, bound.footprint(g, recipe), settings.kv_cache_dtype),
    }
    found = {}
    for side, (measured, footprint, kv) in sides.items():
        rows = []
        for lv in measured.levels:
            batch = min(lv.concurrency, lv.num_prompts)
            step = bound.decode(g, footprint, hw, batch, context, kv, measured.gpus or 1)
            ms = step.seconds * 1e3
            tpot = lv.tpot_median_ms
            if (tpot is None or tpot < ms) and lv.output_tok_s:
                # faster than the bound: the stream delivered tokens in bursts, so the median
                # gap between them times the stream, not a decode step (seen on a 2-core AMX
                # host: 0.003 ms against a 0.32 ms bound); the step from throughput instead
                tpot = 1e3 * batch / lv.output_tok_s
            rows.append(
                BoundLevel(
                    concurrency=lv.concurrency,
                    decode_step_bound_ms=ms,
                    bound_by=step.bound_by,
                    tpot_median_ms=tpot,
                    measured_over_bound=ms / tpot if tpot else None,
                )
            )
        found[side] = rows
    return BoundCheck(hardware=hw.name, hardware_source=hw.source, context=context, **found)


def record_overheads(results, seconds: float, original_cached: bool) -> None:
    """What this serve took beyond its benchmarks (start-up, smoke check, teardown) and, per
    concurrency, each decode step beyond its bound: the chain plan's next estimate."""
    import statistics

    if results.bound is None:
        return
    sides = [results.quantized] if original_cached else [results.quantized, results.original]
    benchmarks = sum(run.duration_s for side in sides for lv in side.levels for run in lv.runs)
    steps: dict[str, list[float]] = {}
    for side in ("original", "quantized"):
        for lv in getattr(results.bound, side):
            if lv.tpot_median_ms is not None:
                extra = (lv.tpot_median_ms - lv.decode_step_bound_ms) / 1e3
                steps.setdefault(str(lv.concurrency), []).append(max(0.0, extra))
    timing.record(
        "serve",
        {
            "seconds": max(0.0, seconds - benchmarks),
            "model": results.model,
            "step_seconds": {c: statistics.median(v) for c, v in steps.items()},
        },
    )
