"""Is a cell worse than before? Each metric against the same cell in a reference run.

quality     worse by more than `quality_sigma` combined standard errors, √(se₁² + se₂²): two
            evaluations of one artifact on the same tokens agree exactly, so only a real change
            in the artifact (or the libraries that run it) moves them
throughput  the quantized / original ratio of output tokens/s (and TTFT) worse by more than
            `throughput_band`, relative: both sides are measured on the same host, side by side,
            so a slower machine cancels out; the band is the run-to-run noise measured with
            benchmarks/serve_noise.py (docs/guide/nightly.md). Where both runs carry the standard
            error of their paired repeats, also by more than `quality_sigma` combined SE: a run
            whose own repeats disagree that much has not measured a change
memory      the checkpoint grew by more than `memory_band`, relative
not finite  any of these NaN or ±inf where it was finite (a measurement that broke); one that
            was not finite is not compared: finite again is no regression
Absolute tokens/s are stored and plotted but not gated: they follow the host.

A quality metric with a noise floor (a `<name>.floor` metric of the run, kind "floor": what the
eval shows when nothing is quantized, pipeline/eval/floor.py) is flagged only when it is also
worse by more than that floor: a change the measurement makes by itself is no regression. A
task's paired change (`<task>.change`, its SE from the paired bootstrap CI) has a floor of the
original's own flips at another batch size, as a share of the items; the answers' length ratio
(`answer_length_ratio`, pipeline/eval/generation.py) the original's own ratio there.
"""

import math
from dataclasses import dataclass
from statistics import NormalDist

from pipeline.nightly.matrix import Thresholds
from pipeline.nightly.store import Metric

GATED_THROUGHPUT = ("_ratio",)  # metric name suffixes compared for throughput
NOT_FINITE = "not finite"  # the limit of a gated figure that turned NaN or ±inf


@dataclass(frozen=True)
class Finding:
    metric: str
    before: float
    now: float
    limit: str  # what "worse" meant, for the report

    def describe(self) -> str:
        return f"{self.metric} {self.before:.4g} → {self.now:.4g} ({self.limit})"


def compare(now: dict[str, Metric], before: dict[str, Metric], t: Thresholds) -> list[Finding]:
    found = []
    for name, m in sorted(now.items()):
        b = before.get(name)
        if b is not None and (limit := _worse(name, m, b, now, t)):
            found.append(Finding(name, b.value, m.value, limit))
    return found


def _worse(name: str, m: Metric, b: Metric, now: dict[str, Metric], t: Thresholds) -> str | None:
    """What `m` is worse than `b` by (the finding's limit), or None. A gated figure that was
    finite and is now NaN or ±inf is a regression of its own, NOT_FINITE: NaN compares false
    with every limit, so no band would catch it. One that was not finite has nothing to be
    worse than: finite again is a recovery, still not finite is not news."""
    gated = (
        m.kind == "quality"
        or (m.kind == "throughput" and name.endswith(GATED_THROUGHPUT))
        or (m.kind == "memory" and name == "checkpoint_bytes")
    )
    if not gated or not math.isfinite(b.value):
        return None
    if not math.isfinite(m.value):
        return NOT_FINITE
    sign = 1 if m.better == "lower" else -1
    worse_by = sign * (m.value - b.value)  # > 0: worse
    if worse_by <= 0:
        return None
    if m.kind == "quality":
        return _quality(worse_by, m, b, now.get(f"{name}.floor"), t)
    if m.kind == "throughput":
        return _throughput(worse_by, m, b, t)
    if b.value and worse_by / b.value > t.memory_band:
        return f"> {t.memory_band:.0%} growth"
    return None


def _quality(
    worse_by: float, m: Metric, b: Metric, floor: Metric | None, t: Thresholds
) -> str | None:
    se = math.hypot(_se(m), _se(b))
    if floor is not None and worse_by <= floor.value:
        return None  # within what the measurement drifts by itself
    if se > 0 and worse_by > t.quality_sigma * se:
        return f"> {t.quality_sigma:g} SE ({se:.2g})"
    return "changed, no standard error" if se == 0 else None


def _throughput(worse_by: float, m: Metric, b: Metric, t: Thresholds) -> str | None:
    se = math.hypot(_se(m), _se(b)) if m.se is not None and b.se is not None else 0.0
    if not b.value or worse_by / abs(b.value) <= t.throughput_band:
        return None
    if worse_by <= t.quality_sigma * se:
        return None  # within the runs' own scatter
    limit = f"> {t.throughput_band:.0%} noise band"
    return limit + (f" and {t.quality_sigma:g} SE ({se:.2g})" if se else "")


def _se(m: Metric) -> float:
    """A standard error to judge by: a missing or non-finite one is none (a NaN would make every
    comparison false and hide the change it should bound)."""
    return m.se if m.se is not None and math.isfinite(m.se) else 0.0


def floor_metrics(results, metric) -> list:
    """An eval's noise floors and paired task changes as nightly metrics (`metric`: the store's
    Metric): each floor in the units of the changes it bounds."""
    found = []
    f = results.heldout.floor
    if f is not None:
        found += [
            metric("kl_mean.floor", f.kl_mean, f.kl_mean_se, "lower", "floor"),
            metric("same_top_pct.floor", 100 - f.same_top_pct, None, "lower", "floor"),
            metric("ppl_ratio.floor", abs(f.ppl_ratio - 1), None, "lower", "floor"),
        ]
    for row in results.tasks:
        p = row.paired
        if p is None:
            continue
        z = NormalDist().inv_cdf((1 + p.confidence) / 2)
        se = (p.change_high - p.change_low) / (2 * z)
        found.append(metric(f"{row.task}.change", p.change, se, "higher", "quality"))
        if p.flips is not None:
            found.append(metric(f"{row.task}.flips", p.flips, None, "lower", "paired"))
        if row.floor is not None:
            fl = row.floor
            moved = fl.flips / fl.items if fl.flips is not None else abs(fl.change)
            found.append(metric(f"{row.task}.change.floor", moved, None, "lower", "floor"))
    return found + _answer_metrics(results.generation, metric)


def _answer_metrics(g, metric) -> list:
    """The generation drift: answer length (quantized / original, its SE from the paired CI;
    its floor the original's own ratio at another batch size, as a distance from 1) and the
    share of answers that part from the original's."""
    if g is None or g.length_ratio is None:
        return []
    z = NormalDist().inv_cdf((1 + g.confidence) / 2)
    se = (g.length_ratio_high - g.length_ratio_low) / (2 * z)
    floor = g.floor.length_ratio
    found = [metric("answer_length_ratio", g.length_ratio, se, "lower", "quality"),
             metric("answers_parted_pct", 100 * (1 - g.identical / g.prompts), None, "lower",
                    "paired")]  # fmt: skip
    if floor is not None:
        found.append(metric("answer_length_ratio.floor", abs(floor - 1), None, "lower", "floor"))
    return found
