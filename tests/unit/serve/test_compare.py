"""Ratios of serving measurements: none from a latency below the resolution floor."""

from pipeline.serve.compare import LATENCY_FLOOR_MS, latency_pair, pair


def test_a_latency_below_the_floor_has_no_ratio_and_says_why():
    # seen on CPU: the original's ITL p50 0.007 ms against 29 ms, shown as 4,152×
    burst = latency_pair(0.007, 29.06)
    assert burst.ratio is None and f"{LATENCY_FLOOR_MS:g} ms resolution floor" in burst.note
    assert latency_pair(40.0, 0.5).ratio is None  # either side


def test_latencies_above_the_floor_and_throughput_keep_their_ratio():
    assert latency_pair(133.0, 54.0).ratio == 54.0 / 133.0 and latency_pair(1, 2).note is None
    assert pair(0.25, 0.5).ratio == 2.0  # throughput has no floor
    assert latency_pair(None, 3.0).ratio is None and latency_pair(None, 3.0).note is None
