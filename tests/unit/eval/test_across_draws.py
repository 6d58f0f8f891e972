"""Calibration sets compared over their seeds: the spread between draws decides."""

import pytest

from pipeline.eval import paired


def test_sets_apart_beyond_their_seeds_spread_are_told_apart():
    found = paired.across_draws([1.0e-3, 1.1e-3, 0.9e-3], [2.0e-3, 2.1e-3, 1.9e-3])
    assert found["diff"] == pytest.approx(-1.0e-3)
    assert found["high"] < 0 and found["draws"] == [3, 3]


def test_a_difference_within_the_seeds_spread_holds_zero():
    found = paired.across_draws([1.0e-3, 2.0e-3], [1.4e-3, 1.8e-3])
    assert found["low"] < 0 < found["high"]


def test_one_seed_a_set_gives_no_interval():
    found = paired.across_draws([1.0e-3], [2.0e-3, 2.2e-3])
    assert found["low"] is None and found["diff"] == pytest.approx(-1.1e-3)
