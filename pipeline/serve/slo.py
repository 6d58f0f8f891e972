"""SLO capacity: at which concurrency a model still meets its latency targets, beside how many
requests its KV pool holds at once — so a user sees whether latency or memory limits them.

A level meets the SLO when the median over its repeats of the share of requests within both
targets (vLLM's goodput: TTFT ≤ slo_ttft_ms and TPOT ≤ slo_tpot_ms) reaches slo_attainment."""

import statistics

from pipeline.config.recipe import ServeSettings
from pipeline.serve.results import Level, SloSide


def attainment(level: Level) -> float | None:
    shares = [run.slo_attainment for run in level.runs] or [level.slo_attainment]
    known = [share for share in shares if share is not None]
    return None if len(known) < len(shares) else statistics.median(known)


def side(levels: list[Level], s: ServeSettings, memory_bound: int | None) -> SloSide:
    shares = {lv.concurrency: attainment(lv) for lv in levels}
    met = [c for c, share in shares.items() if share is not None and share >= s.slo_attainment]
    capacity = max(met, default=None)
    top = max(shares, default=None)
    goodput = None
    if capacity is not None:
        goodput = next(lv.goodput_requests_s for lv in levels if lv.concurrency == capacity)
    return SloSide(
        capacity=capacity,
        capacity_is_lower_bound=capacity is not None and capacity == top,
        goodput_requests_s=goodput,
        attainment=shares,
        memory_bound_concurrency=memory_bound,
        limited_by=_limit(shares, met, memory_bound),
    )


def _limit(shares: dict, met: list[int], memory_bound: int | None) -> str | None:
    """What stops the first level that misses the SLO: memory when the pool cannot hold that
    many requests at once (they queue), else latency. None: every level met it (or no data)."""
    missed = [c for c, share in shares.items() if share is not None and c not in met]
    above = [c for c in missed if c > max(met, default=0)]
    if not above:
        return None
    if memory_bound is not None and min(above) > memory_bound:
        return "memory"
    return "latency"
