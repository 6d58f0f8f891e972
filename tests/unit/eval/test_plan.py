"""The eval stage's plan: the bound of its scoring (pipeline/eval/plan.py)."""

import dataclasses
import os
from pathlib import Path

import pytest

from pipeline.config import recipe
from pipeline.eval import plan as eval_plan
from pipeline.models import aliases
from pipeline.perf import bound
from pipeline.planning import geometry, gpus

H100 = gpus.SPECS["H100-80GB"]


def test_eval_work_is_the_prefill_bound_of_every_window_of_both_sides_and_the_floor():
    """8 windows of 512 a side: 2 forwards of 4 windows each; the floor's 4 held-out windows of
    the original again, 2 a forward (pipeline/eval/floor.py)."""
    g, fp8 = geometry.of(aliases.load_config(aliases.resolve("llama3-8b"))), recipe.load("fp8")
    one = eval_plan.work_seconds(g, fp8, eval_plan.Work(512, 8, 0), H100)
    step = bound.prefill(g, bound.footprint(g, fp8), H100, 4, 512, "auto", 1)
    assert one == pytest.approx(2 * step.seconds)
    both = eval_plan.work_seconds(g, fp8, eval_plan.Work(512, 8, 8), H100)
    original = bound.prefill(g, bound.footprint(g), H100, 4, 512, "auto", 1)
    assert both == pytest.approx(one + 2 * original.seconds)
    floored = eval_plan.work_seconds(g, fp8, eval_plan.Work(512, 8, 8, floor_windows=4), H100)
    again = bound.prefill(g, bound.footprint(g), H100, 2, 512, "auto", 1)
    assert floored == pytest.approx(both + 2 * again.seconds)


def test_the_answers_cost_a_decode_step_a_token_a_batch_for_each_run_that_makes_them():
    """The artifact's 40 answers at answers.BATCH (32 + 8), and where the original answers too,
    its at BATCH and at FLOOR_BATCH (16 + 16 + 8): 2 or 7 batches of 64 decode steps each; a
    70B's decode on an H100 reads its weights at every step, so the steps dominate."""
    g = geometry.of(aliases.load_config(aliases.resolve("llama3-70b")))
    fp8 = recipe.load("fp8")
    asked = eval_plan.Work(512, 0, 0, prompt_tokens=(30,) * 40, new_tokens=64)
    quantized = eval_plan.work_seconds(g, fp8, asked, H100)
    both = eval_plan.work_seconds(g, fp8, dataclasses.replace(asked, original_answers=True), H100)
    step = bound.decode(g, bound.footprint(g, fp8), H100, 32, 30 + 32, "auto", 1)
    assert step.bound_by == "memory"
    assert quantized == pytest.approx(2 * 64 * step.seconds, rel=0.05)
    original = bound.decode(g, bound.footprint(g), H100, 16, 30 + 32, "auto", 1)
    assert both - quantized == pytest.approx((2 + 3) * 64 * original.seconds, rel=0.05)
    # a per-forward overhead goes with these: a small model's are its steps, not its bytes
    assert eval_plan.forwards(asked) == 2 * 64
    assert eval_plan.forwards(dataclasses.replace(asked, original_answers=True)) == 7 * 64
    assert eval_plan.forwards(eval_plan.Work(512, 8, 8, floor_windows=4)) == 2 + 2 + 2


def test_the_hf_cpu_bound_goes_with_the_threads_the_eval_will_get(monkeypatch):
    """Rates probed on every CPU; an eval started under OMP_NUM_THREADS=1 computes on one of
    them: its compute-bound scoring takes that many times longer (a test worker's evals do)."""
    cpu = gpus.Hardware("this host", 2**34, 1e10, {"bf16": 1e11, "fp32": 4e10}, 0.0, "test")
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    g, fp8 = geometry.of(config), recipe.load("fp8")
    monkeypatch.setattr(eval_plan.host, "_path", lambda: Path("/nowhere"))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    work = eval_plan.Work(512, 8, 8)
    every = eval_plan.work_seconds(g, fp8, work, cpu)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert eval_plan.host.threads() == (1, 4)
    assert eval_plan.work_seconds(g, fp8, work, cpu) == pytest.approx(4 * every, rel=0.05)
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")  # torch ignores it too
    assert eval_plan.host.threads() == (4, 4)


def test_overheads_learned_on_a_busy_cpu_are_those_of_a_quiet_one(monkeypatch):
    """The same eval, the host to itself or taking turns with another process: its threads'
    CPU time is the same, and so is what it leaves the next plan (pipeline/perf/timing.py)."""
    from types import SimpleNamespace

    from pipeline.eval import stage as eval_stage

    cpu = gpus.Hardware("this host", 2**34, 1e13, {"bf16": 1e15, "fp32": 1e15}, 0.0, "test")
    monkeypatch.setattr(eval_stage.host, "here", lambda: cpu)
    monkeypatch.setattr(eval_stage.host, "threads", lambda: (1, 2))
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    q = SimpleNamespace(geometry=geometry.of(config), recipe=recipe.load("fp8"),
                        ref=SimpleNamespace(name="m"))  # fmt: skip
    recorded = []
    monkeypatch.setattr(eval_stage.timing, "record", lambda key, m: recorded.append(m))
    work = eval_plan.Work(512, 8, 8)
    bound_s = eval_plan.work_seconds(q.geometry, q.recipe, work, cpu, "hf")
    for wall in (100.0, 200.0):  # alone, then at half the core: the CPU time is the same
        stage = SimpleNamespace(backend="hf", quantize=q, _load_seconds=10.0 * wall / 100,
                                _load_cpu_seconds=10.0)  # fmt: skip
        eval_stage.EvalStage._record_overheads(stage, wall, 5.0 * wall / 100, (0.0, 0.0), work,
                                               100.0)  # fmt: skip
    alone, busy = recorded[0::2], recorded[1::2]
    assert alone == busy and alone[0]["seconds"] == pytest.approx(5.0)
    forwards = eval_plan.forwards(work)
    assert alone[0]["step_seconds"] == pytest.approx((100 - 10 - 5 - bound_s) / forwards)
