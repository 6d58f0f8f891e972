"""The stage contract, and the one runner that gives every stage the same bookkeeping: cache
check, lock, staging folder, status, timing, errors, manifest entry.

A stage is prepared (every check on its input, nothing written), then executed:

    stage = EvalStage.prepare(quantize_stage, backend="hf")
    entry, cached = execute(stage)           # or execute(stage, force=True) to recompute
    results = stage.load_results(entry)      # typed (pydantic) results of that entry

Its `inputs()` decide whether a result can be reused: the entry's fingerprint is their hash.
`work(out)` writes the stage's files into `out`, a staging folder renamed into place only when
`work` returns (the stage's own `staging(final)`: core.files.staging_dir for most), and returns
the metrics recorded in the manifest.
"""

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from pipeline.core import environment, objectstore, quiet
from pipeline.core.checkpoints import Checkpoints
from pipeline.core.errors import interrupted
from pipeline.core.files import sha256_json
from pipeline.core.rundir import HISTORY_STAGES, RunDir, StageEntry, now

KEEP_RESULTS = 8  # per stage and run dir; older ones are pruned (`make clean-cache` for more)


@dataclass(frozen=True)
class Verdict:
    """What a stage's gates say of its finished results: failed, or undecided (too few items
    to decide). Either way the results are whole; the command exits 3."""

    reason: str  # "gate_failed" | "gate_inconclusive"
    message: str


class Stage(Protocol):
    # read, never set, by the runner: a class constant, a field or a property
    @property
    def name(self) -> str: ...  # its key in the manifest

    @property
    def folder(self) -> str: ...  # where its outputs live in the run dir

    @property
    def rundir(self) -> RunDir: ...

    @property
    def header(self) -> dict: ...  # model and recipe, recorded in the manifest

    @property
    def starts_engine(self) -> bool: ...  # it starts a serving engine: the GPUs are freed first

    def verdict(self, entry: StageEntry) -> Verdict | None: ...  # its gates' word; None: passed

    def inputs(self) -> dict: ...

    def before_work(self) -> None: ...  # checks worth making only when the stage will run

    def work(self, out: Path) -> dict: ...

    def outputs(self, folder: str) -> dict[str, str]: ...

    def load_results(self, entry: StageEntry): ...

    # a stage with `resumable = True` is handed its Checkpoints: `work(out, checkpoints)`
    # where `work` writes: most stages take staging_dir (`staging = staticmethod(staging_dir)`);
    # serve keeps a failed attempt's files aside, publish writes beside its earlier cards
    def staging(self, final: Path) -> AbstractContextManager[Path]: ...


class Resumable(Protocol):
    """A stage with `resumable = True`: its `work` is handed its Checkpoints."""

    def work(self, out: Path, checkpoints: Checkpoints) -> dict: ...


def folder_for(stage: Stage, fingerprint: str) -> str:
    """Relative output folder: one per fingerprint for the stages that keep several results."""
    if stage.name in HISTORY_STAGES:
        return f"{stage.folder}/{fingerprint[:16]}"
    return stage.folder


def execute(stage: Stage, force: bool = False) -> tuple[StageEntry, bool]:
    """(manifest entry, was_cached). Raises whatever `work` raises, after recording it."""
    if force:  # `--force` heals: every object is looked at in the store again
        objectstore.forget_checks()
    inputs = stage.inputs()
    fingerprint = sha256_json(inputs)
    rundir = stage.rundir
    if force or not rundir.cached(stage.name, fingerprint):
        _starting(stage)
        stage.before_work()  # its refusals leave nothing behind: no run dir is made before
    with rundir.lock():
        hit = None if force else rundir.cached(stage.name, fingerprint)
        if hit:
            if rundir.stage(stage.name) != hit:  # it becomes the latest again
                rundir.update(stage.header, stage.name, hit)
            else:  # the store may have lost what this mirror holds: it is committed again
                rundir.commit()
            return hit, True
        folder = folder_for(stage, fingerprint)
        entry = StageEntry(
            status="running",
            started=now(),
            fingerprint=fingerprint,
            inputs=inputs,
            outputs=stage.outputs(folder),
            environment=environment.host(),
        )
        rundir.update(stage.header, stage.name, entry)
        t0 = time.monotonic()
        environment.reset_peak_rss()  # each stage's own peak, in a `run` of several
        kept = None
        if getattr(stage, "resumable", False):  # what a killed attempt finished, or why not
            kept = Checkpoints.beside(rundir.path / folder, fingerprint, inputs, force)
            kept.on_keep = rundir.commit  # each unit kept travels with the run folder
        try:
            with stage.staging(rundir.path / folder) as out:
                # kept: the stage is resumable
                metrics = cast(Resumable, stage).work(out, kept) if kept else stage.work(out)
        except BaseException as e:
            stopped = isinstance(e, KeyboardInterrupt)
            entry.status = "interrupted" if stopped else "failed"
            entry.ended, entry.error = now(), interrupted(e) if stopped else _one_line(e)
            entry.metrics = {"wall_seconds": round(time.monotonic() - t0, 2)}
            entry.outputs = _as_left(rundir.path, folder, entry.outputs)
            rundir.update(stage.header, stage.name, entry)
            raise
        entry.status, entry.ended = "done", now()
        entry.metrics = {
            "wall_seconds": round(time.monotonic() - t0, 2),
            "peak_rss_bytes": environment.peak_rss_bytes(),  # this process; vLLM's: serve's own
            **metrics,
        }
        if kept:  # the result is in place: nothing left to resume (nor to commit below)
            kept.remove()
        rundir.update(stage.header, stage.name, entry)
        if stage.name in HISTORY_STAGES:
            rundir.prune(stage.name, KEEP_RESULTS)
    return entry, False


def _starting(stage: Stage) -> None:
    """A line on a user's terminal before a stage's checks and libraries load (llm-compressor's
    import alone is ~7 s on 2 cores, before the stage's first bar). Terminals only: a log or a
    program reading the output gets the stage's own lines, unchanged."""
    out = quiet.terminal()
    if out.isatty():
        r = stage.rundir
        print(f"{stage.name} {r.model_name} × {r.recipe_name}: starting", file=out, flush=True)


def _as_left(root: Path, folder: str, outputs: dict[str, str]) -> dict[str, str]:
    """A stopped stage's outputs as they are on disk: what its staging kept aside (serve's
    <folder>.incomplete/) named there, what never came to be left out."""
    left = {}
    for key, path in outputs.items():
        aside = f"{folder}.incomplete{path.removeprefix(folder)}"
        found = [p for p in (path, aside) if p.startswith(folder) and (root / p).exists()]
        if found:
            left[key] = found[0]
    return left


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text}"[:500]
