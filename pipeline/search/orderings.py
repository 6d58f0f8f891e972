"""The orderings a practitioner expects of a comparison's rows, each checked by mean KL with two
standard errors either side, and said — held, not held, or not resolved — under the table:

- more weight bits drift less: every 8-bit recipe below every 4-bit one;
- data-aware rounding (GPTQ, AWQ, AutoRound: calibrated) drifts less than rounding to nearest
  in the same format (scheme and group size).

Where one does not hold, the output says so rather than the docs assuming it (SmolLM2-135M's
FP8 W8A8 drifts more than its W4A16: docs/figures.md says why)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    weight_bits: int | None
    scheme: str | None
    calibrated: bool  # its weights are rounded with calibration data


def check(rows: list, kinds: dict[str, Kind]) -> list[str]:
    """One line per expected ordering among `rows` (compare_recipes.Row with a mean KL)."""
    done = [r for r in rows if r.kl_mean is not None and r.recipe in kinds]
    lines = []
    for a in done:
        for b in done:
            ka, kb = kinds[a.recipe], kinds[b.recipe]
            if ka.weight_bits and kb.weight_bits and ka.weight_bits >= 8 > kb.weight_bits:
                why = f"{ka.weight_bits}-bit vs {kb.weight_bits}-bit weights"
            elif ka.scheme and ka.scheme == kb.scheme and ka.calibrated and not kb.calibrated:
                why = f"data-aware rounding vs nearest, both {ka.scheme}"
            else:
                continue
            lines.append(f"  {a.recipe} < {b.recipe} ({why}): {_said(a, b)}")
    return lines


def _said(a, b) -> str:
    low_a, high_a = _band(a)
    low_b, high_b = _band(b)
    figures = f"{a.kl_mean:.2e} vs {b.kl_mean:.2e}"
    if high_a < low_b:
        return f"holds ({figures})"
    if low_a > high_b:
        return f"does not hold: {a.recipe} drifts more ({figures})"
    return f"not resolved: within two standard errors ({figures})"


def _band(r) -> tuple[float, float]:
    se = r.kl_mean_se or 0.0
    return r.kl_mean - 2 * se, r.kl_mean + 2 * se
