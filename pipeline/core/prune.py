"""`make clean-cache`: older eval and serve results of every run folder, the latest always kept.
With a remote RUNS_DIR every run's manifest and results are pulled first (no weights), so the
pruning sees what the store holds; objectstore.commit_pruned() then removes them there."""

from pathlib import Path

from pipeline.core import objectstore
from pipeline.core.paths import runs_root
from pipeline.core.rundir import HISTORY_STAGES, RunDir


def run_dirs(keep: int, max_bytes: int | None) -> tuple[Path, list[str]]:
    """(the runs root, what was removed): at most `keep` results per stage and run folder, and
    at most `max_bytes` of them (None: no cap), each folder pruned under its lock."""
    removed = []
    root = runs_root()
    objectstore.pull("", weights=False)
    for manifest in sorted(root.glob("*/*/manifest.json")):
        rundir = RunDir(manifest.parent.parent.name, manifest.parent.name, root)
        with rundir.lock():
            for stage in HISTORY_STAGES:
                removed += rundir.prune(stage, keep, max_bytes)
    return root, removed
