"""quantize → eval → serve: the one sequence behind `quantize`, `eval`, `serve`, `run` and each
nightly cell. Every stage is prepared (all input checked) before any of them runs; each then runs
through the one runner (pipeline/core/stage.py), reusing a cached result when its inputs match.

A failed gate does not stop the flow (serving numbers are still worth having); an error does.
With skip_unsupported, a stage this host cannot run (W4A16 without its vLLM kernel, say) is
recorded as such and the others run: what nightly wants on a mixed fleet.
"""

import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import astuple, dataclass, field

from pipeline.artifact import Artifact
from pipeline.chain.stages import LATER
from pipeline.core import devices, own_process
from pipeline.core.errors import NotOnThisHost, PipelineError, debugging
from pipeline.core.outcome import Outcome, StageOutcome, overall
from pipeline.core.stage import Stage, execute
from pipeline.core.stage_plan import NO_OPTIONS, Options

STAGES = ("quantize", *LATER)
Show = Callable[[object, object, bool], None]  # (stage, entry, cached): what people see


@dataclass
class Flow:
    command: str
    quantize: Artifact  # the stage that makes the artifact: a recipe's quantize, or an import
    later: list = field(default_factory=list)  # prepared eval / serve stages, in order
    skipped: list[StageOutcome] = field(default_factory=list)


def prepare(
    command: str, a: Artifact, stages: tuple[str, ...], options: Options = NO_OPTIONS
) -> Flow:
    """`stages` (of LATER; the artifact's stage always runs first), each prepared: all input
    checked before any runs."""
    flow = Flow(command, a)
    for name in (s for s in LATER if s in stages):
        try:
            flow.later.append(LATER[name].prepare(a, options))
        except NotOnThisHost as e:
            if not options.skip_unsupported:
                raise
            flow.skipped.append(
                StageOutcome(stage=name, status="unsupported", reason=e.reason, message=str(e))
            )
    return flow


def run(flow: Flow, show: Mapping[str, Show], force: AbstractSet[str] = frozenset()) -> Outcome:
    q = flow.quantize
    done: list[StageOutcome] = []
    stages = [q, *flow.later]  # later stages need the artifact: quantize always (cached)
    for i, stage in enumerate(stages):
        own = in_own_process(stage.starts_engine, [s.starts_engine for s in stages[i + 1 :]])
        outcome = _one(stage, show.get(stage.name), stage.name in force, own)
        done.append(outcome)
        if outcome.status == "failed":
            break
    done += flow.skipped
    status, message = overall(done)
    return Outcome.of(
        flow.command, status, message, model=q.ref.name, recipe=q.recipe.name, stages=done,
        paths={"run_dir": str(q.rundir.path), "manifest": str(q.rundir.manifest_path)},
    )  # fmt: skip


def in_own_process(starts: bool, later_start: list[bool]) -> bool:
    """Whether a stage works in a process of its own (pipeline/core/own_process.py): where GPUs
    are seen and a later stage starts a vLLM engine (`later_start`), which needs the GPU memory
    this process would otherwise keep. PIPELINE_STAGE_PROCESS=own|same decides it for every
    stage."""
    said = os.environ.get("PIPELINE_STAGE_PROCESS", "auto")
    if said in ("own", "same"):
        return said == "own"
    return not starts and any(later_start) and bool(devices.seen())


def _one(stage: Stage, show: Show | None, force: bool, own: bool = False) -> StageOutcome:
    started = time.monotonic()
    try:
        if own:
            entry, cached = own_process.call(execute, stage, force)
            execute(stage)  # a cache hit here: this process's stage as if it had worked
        else:
            entry, cached = execute(stage, force=force)
    except PipelineError as e:
        if debugging():
            traceback.print_exc(file=sys.stderr)
        return StageOutcome(stage=stage.name, status="failed", reason=e.reason, message=str(e))
    except Exception as e:  # a bug or a library's crash: the traceback is for the maintainers
        traceback.print_exc(file=sys.stderr)
        message = f"{type(e).__name__}: {' '.join(str(e).split())}"[:1000]
        return StageOutcome(
            stage=stage.name, status="failed", reason="internal_error", message=message
        )
    outcome = StageOutcome(
        stage=stage.name,
        status="cached" if cached else "done",
        fingerprint=entry.fingerprint,
        metrics=entry.metrics,
        paths={k: str(stage.rundir.path / v) for k, v in entry.outputs.items()},
        seconds=round(time.monotonic() - started, 2),
    )
    if verdict := stage.verdict(entry):
        outcome.status, outcome.reason, outcome.message = "gate_failed", *astuple(verdict)
    if show:
        show(stage, entry, cached)
    return outcome
