"""`make clean-cache`: older eval and serve results of every run folder, the latest always kept.
With a remote RUNS_DIR every run's manifest and results are pulled first (no weights), so the
pruning sees what the store holds; Runs.commit_pruned() then removes them there."""

from pipeline.core.rundir import HISTORY_STAGES, RunDir
from pipeline.core.runs import Runs


def run_dirs(runs: Runs, keep: int, max_bytes: int | None) -> list[str]:
    """What was removed under `runs`' local root: at most `keep` results per stage and run
    folder, and at most `max_bytes` of them (None: no cap), each folder pruned under its lock
    (and committed afterwards, all at once: Runs.commit_pruned)."""
    removed = []
    runs.pull("", weights=False)
    fetched = runs.unsynced()
    for manifest in sorted(runs.local.glob("*/*/manifest.json")):
        rundir = RunDir(manifest.parent.parent.name, manifest.parent.name, fetched)
        with rundir.lock():
            for stage in HISTORY_STAGES:
                removed += rundir.prune(stage, keep, max_bytes)
    return removed
