"""The eval stage's plan: the bound of its scoring (pipeline/eval/plan.py)."""

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
