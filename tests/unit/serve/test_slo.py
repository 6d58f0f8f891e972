"""SLO capacity: the highest level whose requests met both targets often enough, and whether
memory or latency stops the next one."""

from pipeline.config.recipe import ServeSettings
from pipeline.serve import slo
from pipeline.serve.results import Level

S = ServeSettings(concurrency=[1, 4, 16], slo_attainment=0.9)


def _level(c: int, shares: list[float]) -> Level:
    runs = [
        {"repeat": r, "sequence": r, "completed": 10, "duration_s": 1.0, "output_tok_s": 1.0,
         "total_tok_s": 1.0, "requests_s": 2.0, "goodput_requests_s": 2.0 * share}
        for r, share in enumerate(shares)
    ]  # fmt: skip
    return Level(
        concurrency=c, num_prompts=10, completed=10, duration_s=1.0, output_tok_s=1.0,
        total_tok_s=1.0, requests_s=2.0, goodput_requests_s=2.0 * shares[0], runs=runs,
    )  # fmt: skip


def test_capacity_is_the_highest_level_that_met_it_and_latency_binds_below_memory():
    levels = [_level(1, [1.0, 1.0]), _level(4, [0.9, 1.0]), _level(16, [0.5, 0.25])]
    side = slo.side(levels, S, memory_bound=100)
    assert side.capacity == 4 and not side.capacity_is_lower_bound
    assert side.attainment == {1: 1.0, 4: 0.95, 16: 0.375}
    assert side.goodput_requests_s == 1.8  # the level's median goodput
    assert side.limited_by == "latency"


def test_memory_binds_when_the_missed_level_is_beyond_what_the_pool_holds():
    levels = [_level(1, [1.0, 1.0]), _level(4, [1.0, 1.0]), _level(16, [0.2, 0.2])]
    assert slo.side(levels, S, memory_bound=8).limited_by == "memory"


def test_met_at_every_level_is_a_lower_bound_and_met_at_none_is_no_capacity():
    every = slo.side([_level(1, [1.0, 1.0]), _level(4, [1.0, 1.0])], S, memory_bound=None)
    assert every.capacity == 4 and every.capacity_is_lower_bound and every.limited_by is None
    none = slo.side([_level(1, [0.0, 0.5]), _level(4, [0.0, 0.0])], S, memory_bound=50)
    assert none.capacity is None and not none.capacity_is_lower_bound
    assert none.goodput_requests_s is None and none.limited_by == "latency"
