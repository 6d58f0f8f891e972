"""The serve stage's plan: the bound of its benchmark (pipeline/serve/plan.py)."""

from pipeline.config import recipe
from pipeline.config.recipe import ServeSettings
from pipeline.models import aliases
from pipeline.perf import bound
from pipeline.planning import geometry, gpus
from pipeline.serve import plan as serve_plan

H100 = gpus.SPECS["H100-80GB"]


def test_serve_work_counts_every_round_of_every_repeat():
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    s = ServeSettings(input_len=32, output_len=16, concurrency=[1, 4], num_prompts=8, repeats=2)
    levels = serve_plan.work(geometry.of(config), recipe.load("fp8"), s, H100)
    one = levels[1]
    step = one["step_seconds"]
    assert step["quantized"] < step["original"]  # 8-bit weights read faster
    fp = bound.footprint(geometry.of(config))
    prefill = bound.prefill(geometry.of(config), fp, H100, 1, 32, "auto", 1).seconds
    original = 2 * 8 * (prefill + 16 * step["original"])  # 2 repeats × 8 rounds of 1
    assert one["benchmark_seconds"] > original
    assert levels[4]["benchmark_seconds"] < one["benchmark_seconds"]  # 2 rounds of 4
