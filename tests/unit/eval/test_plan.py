"""The eval stage's plan: the bound of its scoring (pipeline/eval/plan.py)."""

import os
from pathlib import Path

import pytest

from pipeline.config import recipe
from pipeline.eval import plan as eval_plan
from pipeline.models import aliases
from pipeline.perf import bound
from pipeline.planning import geometry, gpus

H100 = gpus.SPECS["H100-80GB"]


def test_eval_work_is_the_prefill_bound_of_every_window_of_both_sides():
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    fp8 = recipe.load("fp8")
    # 8 windows of 512 a side: 2 forwards of 4 windows each
    one = eval_plan.work_seconds(geometry.of(config), fp8, 8 * 512, 512, H100, sides=1)
    step = bound.prefill(
        geometry.of(config), bound.footprint(geometry.of(config), fp8), H100, 4, 512, "auto", 1
    )
    assert one == pytest.approx(2 * step.seconds)
    both = eval_plan.work_seconds(geometry.of(config), fp8, 8 * 512, 512, H100)
    original = bound.prefill(
        geometry.of(config), bound.footprint(geometry.of(config)), H100, 4, 512, "auto", 1
    )
    assert both == pytest.approx(one + 2 * original.seconds)


def test_the_hf_cpu_bound_goes_with_the_threads_the_eval_will_get(monkeypatch):
    """Rates probed on every CPU; an eval started under OMP_NUM_THREADS=1 computes on one of
    them: its compute-bound scoring takes that many times longer (a test worker's evals do)."""
    cpu = gpus.Hardware("this host", 2**34, 1e10, {"bf16": 1e11, "fp32": 4e10}, 0.0, "test")
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    g, fp8 = geometry.of(config), recipe.load("fp8")
    monkeypatch.setattr(eval_plan.host, "_path", lambda: Path("/nowhere"))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    every = eval_plan.work_seconds(g, fp8, 8 * 512, 512, cpu)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert eval_plan.host.threads() == (1, 4)
    assert eval_plan.work_seconds(g, fp8, 8 * 512, 512, cpu) == pytest.approx(4 * every, rel=0.05)
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")  # torch ignores it too
    assert eval_plan.host.threads() == (4, 4)
