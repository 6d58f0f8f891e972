"""The drift figures, each declared once: its key in a split's results, how tables and plots
say it, its unit and direction, how it is printed, the original's own value, its name on the
model card. eval/drift.py's `summarize` computes them; the nightly cell and report, compare and
the card read them from here (lm-eval's `register_metric` does the same next to its function).

    for m in DRIFT: print(m.label, m.plus_minus(split))   # "mean KL … 1.02e-04 ± 8.0e-06"

A new figure: its entry here, its line in `summarize`, its field in eval/results.py.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class DriftMetric:
    key: str  # in a split's results (eval/results.py's DriftSummary); its SE under key_se
    label: str  # a plot's axis, a report's title
    head: str  # a table's column
    higher_is_better: bool
    fmt: str  # the value's format spec
    se_fmt: str  # its SE's
    at_original: float  # the original against itself: where a plot marks the original
    card: tuple[str, str]  # (model-index metric type, its name) on the model card
    log_scale: bool = False  # spans decades across recipes (a history plot's y axis)

    @property
    def se_key(self) -> str:
        return f"{self.key}_se"

    @property
    def direction(self) -> str:
        """As the nightly store records it: which way is better."""
        return "higher" if self.higher_is_better else "lower"

    def value(self, split: object) -> float | None:
        """Its value in a split's results (None: an older eval, before it was measured)."""
        return getattr(split, self.key, None)

    def se(self, split: object) -> float | None:
        return getattr(split, self.se_key, None)

    def plus_minus(self, split: object) -> str:
        return plus_minus(self.value(split), self.se(split), self.fmt, self.se_fmt)


def plus_minus(value: float | None, se: float | None, spec: str, se_spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec) + ("" if se is None else f" ± {format(se, se_spec)}")


DRIFT: tuple[DriftMetric, ...] = (
    DriftMetric("kl_mean", "mean KL vs original (nats/token)", "mean KL ± SE", False, ".2e",
                ".1e", 0.0, ("kl_divergence", "Mean KL vs original (nats/token)"), True),
    DriftMetric("ppl_ratio", "perplexity ratio", "ppl ratio ± SE", False, ".4f", ".4f", 1.0,
                ("perplexity_ratio", "Perplexity / original")),
    DriftMetric("same_top_pct", "same top-1 token %", "same top % ± SE", True, ".2f", ".2f",
                100.0, ("top1_agreement", "Same top-1 token as original (%)")),
    DriftMetric("top5_pct", "original's top-1 in the top 5 %", "in top 5 % ± SE", True, ".2f",
                ".2f", 100.0, ("top5_agreement", "Original's top-1 token in the top 5 (%)")),
)  # fmt: skip
BY_KEY = {m.key: m for m in DRIFT}
