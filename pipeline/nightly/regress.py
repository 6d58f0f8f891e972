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
Absolute tokens/s are stored and plotted but not gated: they follow the host.
"""

import math
from dataclasses import dataclass

from pipeline.nightly.matrix import Thresholds
from pipeline.nightly.store import Metric

GATED_THROUGHPUT = ("_ratio",)  # metric name suffixes compared for throughput


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
        if b is None:
            continue
        sign = 1 if m.better == "lower" else -1
        worse_by = sign * (m.value - b.value)  # > 0: worse
        if worse_by <= 0:
            continue
        if m.kind == "quality":
            se = math.hypot(m.se or 0.0, b.se or 0.0)
            if se > 0 and worse_by > t.quality_sigma * se:
                found.append(
                    Finding(name, b.value, m.value, f"> {t.quality_sigma:g} SE ({se:.2g})")
                )
            elif se == 0 and worse_by > 0:
                found.append(Finding(name, b.value, m.value, "changed, no standard error"))
        elif m.kind == "throughput" and name.endswith(GATED_THROUGHPUT):
            se = math.hypot(m.se, b.se) if m.se is not None and b.se is not None else 0.0
            if b.value and worse_by / abs(b.value) > t.throughput_band:
                if worse_by > t.quality_sigma * se:
                    limit = f"> {t.throughput_band:.0%} noise band"
                    limit += f" and {t.quality_sigma:g} SE ({se:.2g})" if se else ""
                    found.append(Finding(name, b.value, m.value, limit))
        elif m.kind == "memory" and name == "checkpoint_bytes":
            if b.value and worse_by / b.value > t.memory_band:
                found.append(Finding(name, b.value, m.value, f"> {t.memory_band:.0%} growth"))
    return found
