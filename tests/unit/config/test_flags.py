"""Serve flags are generated from ServeSettings, and a matrix's serve block turns back into the
same flags: one definition of the schema."""

import argparse

import pytest

from pipeline.config import flags
from pipeline.config.recipe import ServeSettings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    flags.add(p, ServeSettings)
    return p


def test_every_serve_setting_is_a_flag_with_its_description():
    p = _parser()
    dests = {a.dest for a in p._actions}
    assert set(ServeSettings.model_fields) <= dests
    help_of = {a.dest: a.help for a in p._actions}
    assert "random prompt tokens" in help_of["input_len"]


def test_overrides_round_trip_through_argv():
    values = {
        "concurrency": [1, 4, 16],
        "input_len": 256,
        "gpu_memory_utilization": 0.85,
        "enforce_eager": True,
        "kv_cache_dtype": "fp8",
        "cpu_omp_threads_bind": "0-1",
    }
    args = _parser().parse_args(flags.to_argv(values))
    assert flags.overrides(vars(args), ServeSettings) == values
    assert flags.overrides(vars(_parser().parse_args([])), ServeSettings) == {}


def test_a_false_boolean_is_an_explicit_no_flag():
    argv = flags.to_argv({"enforce_eager": False})
    assert argv == ["--no-enforce-eager"]
    assert flags.overrides(vars(_parser().parse_args(argv)), ServeSettings) == {
        "enforce_eager": False
    }


@pytest.mark.parametrize("bad", ["1,x", "0,4", ","])
def test_concurrency_lists_must_be_positive_integers(bad):
    with pytest.raises(argparse.ArgumentError):
        _parser().parse_args(["--concurrency", bad])


@pytest.mark.parametrize(
    "text, size",
    [
        ("48GiB", 48 * 2**30),
        ("64GB", 64 * 10**9),
        ("2g", 2 * 2**30),  # a bare letter is binary, as `free -g` says (ByteSize: decimal)
        ("1024k", 2**20),
        (" 1.5 gib ", int(1.5 * 2**30)),
        ("1500MiB", 1500 * 2**20),
        ("1048576", 2**20),  # bytes
        ("1tb", 10**12),
    ],
)
def test_memory_sizes(text, size):
    assert flags.memory_size(text) == size


@pytest.mark.parametrize(
    "bad, why",
    [
        ("48GiBx", "expected a size like 48GiB"),
        ("1pb", "expected a size like 48GiB"),  # ByteSize knows it; no host has one
        ("1bit", "expected a size like 48GiB"),
        ("-1g", "expected a size like 48GiB"),
        ("", "expected a size like 48GiB"),
        ("1MB", "from 1MiB"),
        ("100000000000000000000", "from 1MiB"),
    ],
)
def test_memory_sizes_refused(bad, why):
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        flags.memory_size(bad)
