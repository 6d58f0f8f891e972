"""One plan for the chain: `run|eval|serve --dry-run`, offline, from the config alone.

Each stage plans itself in its own folder (the artifact's stage: `stage_plan()`; the later
ones: their `plan` in chain/stages.py) — where it runs, its memory, the files it writes or
downloads, its time and how that was derived, what this host refuses of it. The chain adds the
CUDA driver's refusals, which stages work in a process of their own, and the disk per
filesystem, and renders. Any refusal makes the command exit 4 before any download or load.
"""

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.artifact import Artifact
from pipeline.chain import flow
from pipeline.chain.stages import LATER
from pipeline.config.engine_name import ENGINE
from pipeline.core import devices, environment
from pipeline.core.errors import NotOnThisHost
from pipeline.core.paths import hub_cache
from pipeline.core.runs import Runs
from pipeline.core.stage_plan import NO_OPTIONS, Options, StagePlan, Upstream
from pipeline.engines import engine_plan, serving_env

GIB = 2**30


@dataclass
class ChainPlan:
    model: str
    recipe: str
    host: dict  # the GPUs seen, how they came about, the CPU count
    stages: dict[str, StagePlan]  # the artifact's stage ("quantize") first, then in run order
    refusals: list[str] = field(default_factory=list)  # what this host cannot do: exit 4
    disk: list[dict] = field(default_factory=list)  # bytes written per filesystem, free there

    def record(self) -> dict:
        """What `--dry-run --json` prints."""
        return {
            "model": self.model,
            "recipe": self.recipe,
            "host": self.host,
            "stages": {name: p.record() for name, p in self.stages.items()},
            "refusals": self.refusals,
            "disk": self.disk,
        }


def build(a: Artifact, stages: tuple[str, ...], options: Options = NO_OPTIONS) -> ChainPlan:
    """The chain's plan for the artifact's stage `a` followed by `stages` (of LATER)."""
    visible = environment.gpus()
    made = a.stage_plan()
    up = Upstream(visible, made.artifact_bytes)
    plans: dict[str, StagePlan] = {"quantize": made}
    for name in (s for s in LATER if s in stages):
        plans[name] = LATER[name].plan(a, options, up)
    host = {"gpus": visible, "cpu_count": environment.host()["cpu_count"], **_seen()}
    plan = ChainPlan(a.ref.name, a.recipe.name, host, plans)
    plan.refusals = (
        serving_env.driver_refusals()
    )  # CUDA builds the driver cannot run: before any stage
    for stage in plans.values():  # a stage refused for the host's own reason: said once
        plan.refusals += [r for r in stage.refusals if not any(d in r for d in plan.refusals)]
    _processes(plans)
    plan.disk = _disk(plans, plan.refusals, a.rundir.runs)
    return plan


def _processes(plans: dict[str, StagePlan]) -> None:
    """Which stages work in a process of their own (flow.in_own_process: where GPUs are seen
    and a later stage starts vLLM), so that they leave no GPU memory to the next."""
    starts = [p.starts_engine() for p in plans.values()]
    for i, stage in enumerate(plans.values()):
        if flow.in_own_process(starts[i], starts[i + 1 :]):
            stage.process = f"its own: its GPU memory is freed before {ENGINE} starts"
            stage.leaves_on_gpus_bytes = 0


def _seen() -> dict:
    """How the visible GPUs came about: nvidia-smi's list and CUDA_VISIBLE_DEVICES."""
    return {
        "gpus_listed": len(devices.listed()),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def free_bytes(path) -> int:
    """Free space on `path`'s filesystem: the one seam tests replace to stand a plan on a disk
    of a given size."""
    return shutil.disk_usage(path).free


def _disk(plans: dict[str, StagePlan], refusals: list, runs: Runs) -> list[dict]:
    """Bytes written per filesystem (the hub cache's and the runs root's may differ) against
    what each has free."""
    places: dict[int, dict] = {}  # device → what is written there
    for stage in plans.values():
        for what, size in stage.files:
            root = hub_cache() if what.startswith("original (hub") else runs.local
            existing = _existing(root)
            device = os.stat(existing).st_dev
            place = places.setdefault(device, {"roots": set(), "total_bytes": 0})
            place["roots"].add(str(root))
            place["total_bytes"] += size
            place["free_bytes"] = free_bytes(existing)
            if not _writable(existing):
                place["unwritable"] = str(existing)
    found = []
    for place in places.values():
        roots = ", ".join(sorted(place["roots"]))
        found.append({**place, "roots": roots})
        if place.get("unwritable"):  # its free space says nothing: nothing can go there
            refusals.append(
                f"disk: the chain writes under {roots}, and {place['unwritable']} cannot be "
                f"written by this user; point {_fix(place['roots'], runs)} at a folder that can"
            )
        elif place["total_bytes"] > place["free_bytes"]:
            refusals.append(
                f"disk: the chain writes ~{place['total_bytes'] / GIB:.1f} GiB under {roots}; "
                f"{place['free_bytes'] / GIB:.1f} GiB free there; point "
                f"{_fix(place['roots'], runs)} at a bigger disk"
            )
    return found


def _fix(roots: set, runs: Runs) -> str:
    """The variables that move what the chain writes under `roots`."""
    hub = str(hub_cache()) in roots
    mine = str(runs.local) in roots
    return " or ".join(["HF_HUB_CACHE"] * hub + [runs.variable] * mine) or "them"


def _writable(folder: Path) -> bool:
    """Whether this user can make a folder in `folder`, tried (and removed at once): the
    permission bits do not say it for root, nor for /proc or a read-only mount."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".plan-probe-", dir=folder))
    except OSError:
        return False
    return True


def _existing(root: Path) -> Path:
    path = root
    while not path.exists():
        path = path.parent
    return path


def render(chain: ChainPlan) -> str:
    plan = chain.record()
    lines = [f"chain plan: {plan['model']} × {plan['recipe']}"]
    host = plan["host"]
    if host["gpus_listed"]:
        names = sorted(set(g.split(",")[0] for g in host["gpus"])) or ["none"]
        how = f"nvidia-smi lists {host['gpus_listed']}"
        if host["cuda_visible_devices"] is not None:
            how = f"CUDA_VISIBLE_DEVICES={host['cuda_visible_devices']}; {how}"
        lines.append(f"GPUs        {len(host['gpus'])} seen: {', '.join(names)} ({how})")
    for name, stage in plan["stages"].items():
        lines.append(f"{name}")
        if where := stage.get("where"):
            lines.append(f"  where      {where}")
        if stage.get("backend"):
            lines.append(f"  backend    {stage['backend']}, {stage['tokens']:,} tokens scored")
        for side, ref in (stage.get("on_gpus") or {}).items():
            n = engine_plan.gpu_count(ref)
            lines.append(f"  {side:<10} with {ENGINE} on {ref['gpu']}: {n} GPU(s){_engine(ref)}")
        if (placed := stage.get("placement")) and "mode" in placed:
            lines.append(f"  placement  {placed['mode']}: {placed['reason']}")
            for side in placed["sides"].values():
                lines.append(f"  {'':<10} {side['describe']}")
        for side, launch in (stage.get("launches") or {}).items():
            lines.append(f"  launch     {side}: {launch['command']}")
        for side, engine in (stage.get("engines") or {}).items():
            ref = engine["on_gpus"]
            needs = f"on {ref['gpu']}: {engine_plan.gpu_count(ref)} GPU(s){_engine(ref)}"
            if "refused" in engine:
                lines.append(f"  {side:<10} {needs}; here refused: {engine['refused']}")
            elif plan["host"]["gpus"]:
                pp = engine.get("pipeline_parallel_size", 1)
                stages = f" × pipeline {pp}" if pp > 1 else ""
                lines.append(
                    f"  {side:<10} tensor parallel {engine['tensor_parallel_size']}{stages}, "
                    f"{engine['weights_per_gpu_bytes'] / GIB:.1f} GiB of weights per GPU"
                    + (
                        f"; {ENGINE}'s engine {engine['engine_line']}"
                        if "engine_line" in engine
                        else ""
                    )
                )
            else:
                lines.append(
                    f"  {side:<10} {needs}; here one CPU engine, "
                    f"~{engine['cpu_ram_bytes'] / GIB:.1f} GiB of RAM"
                )
        if stage.get("cpu_ram_bytes"):
            lines.append(f"  CPU RAM    ~{stage['cpu_ram_bytes'] / GIB:.1f} GiB peak")
        if stage.get("process"):
            lines.append(f"  process    {stage['process']}")
        for what, size in stage["files"]:
            lines.append(f"  disk       {size / GIB:8.2f} GiB  {what}")
        lines.append(f"  time       {stage['time']}")
    for place in plan["disk"]:
        lines.append(
            f"disk total  ~{place['total_bytes'] / GIB:.1f} GiB under {place['roots']}; "
            f"{place['free_bytes'] / GIB:.1f} GiB free there"
        )
    return "\n".join(lines)  # its refusals: the command's one error line (refused())


def _engine(ref: dict) -> str:
    """A reference layout's engine memory per GPU and why smaller layouts would not start."""
    said = f"; {ENGINE}'s engine per GPU {ref['engine_line']}" if ref.get("engine_line") else ""
    return said + "".join(f"; {why}" for why in ref.get("refused", []))


def disk_and_time_lines(plan: dict) -> str:
    """The quantize plan's tail: what it writes where, the free space there, its time and
    what this host refuses (`plan`: the quantize plan with the chain's files, disk, time and
    refusals)."""
    lines = [f"disk        {size / GIB:8.2f} GiB  {what}" for what, size in plan["files"]]
    for place in plan["disk"]:
        lines.append(
            f"disk total  ~{place['total_bytes'] / GIB:.1f} GiB under {place['roots']}; "
            f"{place['free_bytes'] / GIB:.1f} GiB free there"
        )
    lines.append(f"time        {plan['time']}")
    return "\n".join(lines)


def refused(refusals: list[str]) -> None:
    """A dry run's exit 4: every refusal in its one error line, said there only (the plan's
    text above it leaves them out)."""
    if refusals:
        raise NotOnThisHost("; ".join(dict.fromkeys(refusals)))
