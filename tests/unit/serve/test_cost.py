"""$ per 1M output tokens and the bound check, from given measurements (the arithmetic only;
the e2e serve tests check they are written from real runs)."""

import pytest

from pipeline.config import recipe
from pipeline.config.recipe import ServeSettings
from pipeline.models import aliases
from pipeline.perf import prices
from pipeline.planning import geometry, gpus
from pipeline.serve import cost
from pipeline.serve.results import Level, Measurement, Run, Slo, SloSide

PRICE = prices.Price(3.6, "test")  # $3.60 an hour: $1 per 1M tokens at 1,000 tokens/s


def level(concurrency: int, *tok_s: float, tpot: float = 10.0) -> Level:
    runs = [
        Run(
            completed=8,
            duration_s=1,
            output_tok_s=t,
            total_tok_s=t,
            requests_s=1,
            repeat=i,
            sequence=i,
            tpot_median_ms=tpot,
        )  # fmt: skip
        for i, t in enumerate(tok_s)
    ]
    median = sorted(tok_s)[len(tok_s) // 2]
    return Level(completed=8, duration_s=1, output_tok_s=median, total_tok_s=median,
                 requests_s=1, concurrency=concurrency, num_prompts=8, runs=runs,
                 tpot_median_ms=tpot)  # fmt: skip


def side(levels: list[Level], gpus_used: int | None) -> Measurement:
    return Measurement(model_dir="m", served_name="m", complete=True, max_model_len=256,
                       checkpoint_bytes=1, gpus=gpus_used, levels=levels)  # fmt: skip


def slo_sides(o: int | None, q: int | None) -> Slo:
    def one(capacity):
        return SloSide(capacity=capacity, capacity_is_lower_bound=False, goodput_requests_s=None,
                       attainment={}, memory_bound_concurrency=None, limited_by=None)  # fmt: skip

    return Slo(ttft_ms=1, tpot_ms=1, attainment=0.9, original=one(o), quantized=one(q))


def test_cost_per_million_tokens_per_level_with_paired_spread():
    original = side([level(1, 1000, 1000, 1000), level(4, 2000, 2000, 2000)], gpus_used=2)
    quantized = side([level(1, 1000, 1250, 2000), level(4, 4000, 4000, 4000)], gpus_used=1)
    found = cost.cost(original, quantized, slo_sides(4, 4), True, PRICE, "H100-80GB")
    one, four = found.levels
    p = one.usd_per_million_output_tokens
    assert p.original == pytest.approx(2.0)  # 2 GPUs at 1,000 tokens/s
    assert p.quantized == pytest.approx(1 / 1.25)  # 1 GPU at the median 1,250
    # per repeat: (1 / tok_q) / (2 / tok_o) = 0.5, 0.4, 0.25 → median 0.4
    assert p.ratio == pytest.approx(0.4) and p.spread == pytest.approx((0.25, 0.5))
    assert p.ratio_se is not None
    assert four.usd_per_million_output_tokens.ratio == pytest.approx(0.25)
    assert found.units == {"original": 2, "quantized": 1}
    assert found.at_slo_capacity.original == pytest.approx(1.0)
    assert found.at_slo_capacity.quantized == pytest.approx(0.25)


def test_no_price_no_cost_and_no_capacity_no_figure():
    o, q = side([level(1, 1000)], None), side([level(1, 500)], None)
    assert cost.cost(o, q, slo_sides(None, None), False, None, "GPU X") is None
    found = cost.cost(o, q, slo_sides(None, 1), False, PRICE, cost.CPU_HOST)
    assert found.units == {"original": 1, "quantized": 1}  # one host each
    assert found.at_slo_capacity.original is None and found.at_slo_capacity.ratio is None
    assert found.levels[0].usd_per_million_output_tokens.ratio == pytest.approx(2.0)
    assert found.levels[0].usd_per_million_output_tokens.spread is None  # unpaired


def test_measured_over_bound_is_the_bound_step_over_the_measured_tpot():
    config = aliases.load_config(aliases.resolve("llama3-8b"))
    settings = ServeSettings(input_len=128, output_len=64, concurrency=[1], num_prompts=8)
    hw = gpus.SPECS["H100-80GB"]
    o = side([level(1, 100, tpot=20.0)], 1)
    q = side([level(1, 150, tpot=10.0)], 1)
    found = cost.against_bound(geometry.of(config), recipe.load("fp8"), o, q, settings, hw)
    assert found.context == 128 + 32
    (lo,), (lq,) = found.original, found.quantized
    # bf16 Llama-3-8B, one sequence: ~15 GB read at 3.35 TB/s ≈ 4.5 ms a step
    assert 4.3 < lo.decode_step_bound_ms < 4.7 and lo.bound_by == "memory"
    assert lo.measured_over_bound == pytest.approx(lo.decode_step_bound_ms / 20.0)
    assert lq.decode_step_bound_ms < 0.6 * lo.decode_step_bound_ms  # 8-bit weights
    assert found.hardware == "H100-80GB"
