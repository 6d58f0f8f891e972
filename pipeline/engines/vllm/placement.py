"""Where the two sides of a paired serve run on the GPUs this process sees: decided once, here,
as a pure function of the sides' needs and the visible GPUs.

vLLM 0.32's rules that shape it:
- An engine asks for gpu_memory_utilization × the GPU's memory at start-up and refuses when less
  is free (`request_memory`, vllm/v1/worker/utils.py): two engines at our default 0.9 cannot
  share a GPU.
- It sizes its KV cache from the free memory it profiles while it loads, assuming that "the
  other processes using the same GPU did not change their memory usage during the profiling"
  (`determine_available_memory`, vllm/v1/worker/gpu_worker.py): engines that share GPUs start
  one after the other.

The modes, the first that holds:
  cpu           no GPU: both engines in RAM, side by side
  side-by-side  each side on GPUs of its own at its planned TP, each at the full share
  shared        both on the same GPUs at the larger TP, the memory split so that each holds
                its weights and the benchmark's KV cache (equal halves where both fit in one)
  sequential    one after the other, each alone on the GPUs: the ratio is then unpaired
(`alone`, made by the serve stage where the original comes from its cached reference: each side
where a paired serve places it, only the artifact's server up.)
A serve spanning nodes is refused: the pipeline starts its servers on this node.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.config.engine_defaults import GPU_MEMORY_UTILIZATION
from pipeline.core.devices import Gpu
from pipeline.core.errors import NotOnThisHost

UTILIZATION = GPU_MEMORY_UTILIZATION  # the share of each GPU a plan may give out
GIB = 2**30


@dataclass(frozen=True)
class Need:
    """One side as the planner sized it: its TP, and its bytes per GPU at a given TP
    (weights / TP + the benchmark's KV cache on one rank + the engine's overhead)."""

    key: str  # "original" | "quantized"
    label: str  # what the user calls it: "original", "fp8", …
    tensor_parallel_size: int
    bytes_per_gpu: Callable[[int], int] = field(compare=False)
    pipeline_parallel_size: int = 1  # stages on this node (set by the user)

    @property
    def gpu_count(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True)
class SidePlace:
    key: str
    label: str
    gpus: tuple[Gpu, ...]  # empty on a CPU host
    tensor_parallel_size: int
    memory_share: float  # --gpu-memory-utilization
    pipeline_parallel_size: int = 1

    def record(self) -> dict:
        """What results keep: the host's GPU indices and UUIDs, TP and share."""
        return {
            "gpus": [g.index for g in self.gpus],
            "gpu_uuids": [g.uuid for g in self.gpus],
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "gpu_memory_utilization": self.memory_share if self.gpus else None,
        }

    def describe(self) -> str:
        if not self.gpus:
            return f"{self.label} in RAM (one CPU engine)"
        which = ",".join(str(g.index) for g in self.gpus)
        plural = "s" if len(self.gpus) > 1 else ""
        pp = f" × PP {self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else ""
        return (
            f"{self.label} on GPU{plural} {which} (TP {self.tensor_parallel_size}{pp}, "
            f"{self.memory_share:g} of each)"
        )


@dataclass(frozen=True)
class Placement:
    mode: str  # cpu | side-by-side | shared | sequential
    sides: tuple[SidePlace, ...]
    reason: str

    @property
    def paired(self) -> bool:
        """Whether the sides run at the same time (their ratios paired run by run)."""
        return self.mode != "sequential"

    @property
    def start_in_turn(self) -> bool:
        """Engines that share GPUs must not profile memory at the same time."""
        return self.mode == "shared"

    def side(self, key: str) -> SidePlace:
        return next(s for s in self.sides if s.key == key)

    def record(self) -> dict:
        return {"mode": self.mode, "reason": self.reason}

    def describe(self) -> str:
        return f"{self.mode}: " + "; ".join(s.describe() for s in self.sides) + f" — {self.reason}"


def place(needs: list[Need], gpus: list[Gpu], utilization: float = UTILIZATION) -> Placement:
    """Each side's GPUs and memory share (see the module's docstring for the rules)."""
    if not gpus:
        sides = tuple(SidePlace(n.key, n.label, (), 1, utilization) for n in needs)
        return Placement("cpu", sides, "no GPU visible: vLLM's CPU engines, side by side in RAM")
    for n in needs:
        if n.gpu_count > len(gpus):
            raise NotOnThisHost(
                f"{n.label}: {n.gpu_count} GPUs (TP {n.tensor_parallel_size} × PP "
                f"{n.pipeline_parallel_size}) are more than the {len(gpus)} this process sees; "
                "a serve spanning nodes is not run by the pipeline (vLLM's Ray executor: "
                "--distributed-executor-backend ray)"
            )
    wanted = sum(n.gpu_count for n in needs)
    if wanted <= len(gpus):
        return _side_by_side(needs, gpus, utilization)
    shared = _shared(needs, gpus, utilization)
    if shared:
        return shared
    tps = " + ".join(f"{n.label} {n.gpu_count}" for n in needs)
    return Placement(
        "sequential",
        tuple(_alone(n, gpus, utilization) for n in needs),
        f"{tps} GPUs make {wanted}, {len(gpus)} visible, and the sides do not fit together on "
        f"{_tp(needs)} GPU(s) within {utilization:g} of each: served one after the other, "
        "the ratios unpaired",
    )


def _alone(n: Need, gpus: list[Gpu], utilization: float) -> SidePlace:
    tp, pp = n.tensor_parallel_size, n.pipeline_parallel_size
    return SidePlace(n.key, n.label, tuple(gpus[: n.gpu_count]), tp, utilization, pp)


def _side_by_side(needs: list[Need], gpus: list[Gpu], utilization: float) -> Placement:
    sides, start = [], 0
    for n in needs:
        tp, pp, count = n.tensor_parallel_size, n.pipeline_parallel_size, n.gpu_count
        sides.append(
            SidePlace(n.key, n.label, tuple(gpus[start : start + count]), tp, utilization, pp)
        )
        start += count
    return Placement(
        "side-by-side",
        tuple(sides),
        f"{start} of the {len(gpus)} visible GPUs hold each side on its own at its planned TP",
    )


def _shared(needs: list[Need], gpus: list[Gpu], utilization: float) -> Placement | None:
    """Both sides on the first T GPUs (T: the larger TP; both accept it, as one model's sizes
    do): equal shares where each fits in one, else shares in proportion to what each holds."""
    if any(n.pipeline_parallel_size > 1 for n in needs):
        return None  # stages hold unequal layers: not split by this arithmetic
    tp = _tp(needs)
    memory = min(g.memory_bytes for g in gpus[:tp])
    fractions = [n.bytes_per_gpu(tp) / memory for n in needs]
    # in whole hundredths, as the flag is written: each at least its need, together at most
    # the utilization (exact integers: float hundredths can sum past it)
    budget = int(utilization * 100 + 1e-9)
    least = [math.ceil(f * 100 - 1e-9) for f in fractions]
    if sum(least) > budget:
        return None
    if max(least) <= budget // len(needs):
        hundredths = [budget // len(needs)] * len(needs)
        how = "equal shares"
    else:  # each its need, and the rest in proportion to it
        slack = budget - sum(least)
        hundredths = [x + slack * x // sum(least) for x in least]
        how = "shares in proportion to what each holds (KV capacity compared at unequal budgets)"
    shares = [h / 100 for h in hundredths]
    sides = tuple(
        SidePlace(n.key, n.label, tuple(gpus[:tp]), tp, share)
        for n, share in zip(needs, shares, strict=True)
    )
    held = ", ".join(f"{n.label} {f * memory / GIB:.1f}" for n, f in zip(needs, fractions,
                                                                       strict=True))  # fmt: skip
    return Placement(
        "shared",
        sides,
        f"too few GPUs for each side on its own; at TP {tp} they hold {held} GiB per GPU of "
        f"{memory / GIB:.0f}: {how}, started one after the other",
    )


def _tp(needs: list[Need]) -> int:
    return max(n.gpu_count for n in needs)
