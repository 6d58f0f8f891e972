"""The orderings a comparison is expected to show, said under its table."""

from pipeline.search.compare_recipes import Row
from pipeline.search.orderings import Kind, check

KINDS = {
    "fp8": Kind(8, "FP8_DYNAMIC", False),
    "w4a16-rtn": Kind(4, "W4A16", False),
    "gptq": Kind(4, "W4A16", True),
    "awq": Kind(4, "W4A16_ASYM", True),
}


def _row(recipe: str, kl: float, se: float) -> Row:
    return Row(recipe, "ok", drift={"kl_mean": kl, "kl_mean_se": se})


def test_each_expected_pair_is_said_held_not_held_or_unresolved():
    rows = [_row("fp8", 3e-2, 4e-4), _row("w4a16-rtn", 2e-2, 3e-4), _row("gptq", 1.2e-2, 2e-4),
            _row("awq", 1.21e-2, 1e-3)]  # fmt: skip
    lines = check(rows, KINDS)
    assert any(x.startswith("  gptq < w4a16-rtn (data-aware rounding") and "holds" in x
               for x in lines)  # fmt: skip
    assert any(x.startswith("  fp8 < w4a16-rtn (8-bit vs 4-bit") and "does not hold: fp8" in x
               for x in lines)  # fmt: skip
    # awq is asymmetric: another format than RTN's, so no data-aware pair with it
    assert not any("awq < w4a16-rtn" in x for x in lines)
    assert len(lines) == 4  # fp8 against each 4-bit recipe, and gptq against RTN


def test_a_difference_within_two_standard_errors_is_not_resolved():
    rows = [_row("gptq", 1.0e-2, 1e-3), _row("w4a16-rtn", 1.2e-2, 1e-3)]
    assert check(rows, KINDS) == [
        "  gptq < w4a16-rtn (data-aware rounding vs nearest, both W4A16): not resolved: within "
        "two standard errors (1.00e-02 vs 1.20e-02)"
    ]
