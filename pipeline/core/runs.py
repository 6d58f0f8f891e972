"""Where run folders live, as one value made at the entry point and handed down: a local root,
and the object store it mirrors (RUNS_DIR=s3://…; None: the folder is all there is).

The command line makes it once (`Runs.from_env()`, the one reader of RUNS_DIR beside paths'
own check); stages, the chain, advise, search, publish and the nightly are handed it. A Ray
worker's cell is an entry point of its own: it makes its own from the RUNS_DIR its task was
handed (nightly/executors.py).

Pull and push are the only sync points, and each takes the store it syncs with: a run folder
and its model's original are pulled before a stage reads them (`pull_run`), and committed
after every write of its manifest (RunDir.write → `push_run`). A RunDir opens no store itself.

    runs = Runs.from_env()
    runs.pull_run("tiny-llama", "fp8")            # before the stages read
    rundir = RunDir("tiny-llama", "fp8", runs)    # local; each manifest write commits via runs
"""

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import objectstore
from pipeline.core.paths import mirror_root, runs_url

ORIGINAL = "original"  # a model's folder for its original: the references eval and serve keep


def key(model: str, recipe: str) -> str:
    """A run folder's path under the root, and its name in the store."""
    return f"{model}/{recipe}"


@dataclass(frozen=True)
class Runs:
    local: Path  # where stages read and write: RUNS_DIR, or the store's mirror under the cache
    remote: str | None = None  # the object store the local root mirrors; None: no store

    @classmethod
    def from_env(cls) -> "Runs":
        """RUNS_DIR's: a folder (default ./runs), or an object store and its mirror under the
        cache (paths.mirror_root)."""
        if remote := runs_url():
            return cls(mirror_root(remote), remote)
        return cls(Path(os.environ.get("RUNS_DIR") or Path.cwd() / "runs").resolve())

    def folder(self, model: str, recipe: str) -> Path:
        return self.local / key(model, recipe)

    def unsynced(self) -> "Runs":
        """The same local root with no store: read and written here, committed by nobody (what
        a metadata-only pull fetched for advise and clean-cache)."""
        return Runs(self.local)

    @property
    def variable(self) -> str:
        """The variable that moves `local`: RUNS_DIR, or for a store the cache its mirror lives
        under (pointing RUNS_DIR elsewhere would free no byte here)."""
        return "PIPELINE_CACHE" if self.remote else "RUNS_DIR"

    @property
    def setting(self) -> str:
        """RUNS_DIR's value for these runs: what a Ray worker's cell is handed."""
        return self.remote or str(self.local)

    def pull(self, rel: str, *, weights: bool = True) -> None:
        """Fetch the run folders stored at or under `rel` (objectstore.pull); no-op without a
        store."""
        if self.remote:
            objectstore.pull(self.remote, self.local, rel, weights=weights)

    def push(self, rel: str, *, if_unchanged: bool = False) -> bool:
        """Commit `rel` from the local root (objectstore.push); False without a store."""
        if not self.remote:
            return False
        return objectstore.push(self.remote, self.local, rel, if_unchanged=if_unchanged)

    def pull_run(self, model: str, recipe: str) -> None:
        """A run folder and its model's original (the eval's and serve's references): what its
        stages read."""
        for rel in _run_and_original(model, recipe):
            self.pull(rel)

    def push_run(self, model: str, recipe: str) -> None:
        """The original's references, then the run (its manifest last)."""
        for rel in _run_and_original(model, recipe):
            self.push(rel)

    def commit_pruned(self) -> list[str]:
        """After a local prune of every run folder: the store pruned too (commits, then its
        GC); lines for people, [] without a store."""
        return objectstore.commit_pruned(self.remote, self.local) if self.remote else []


def _run_and_original(model: str, recipe: str) -> tuple[str, str]:
    return key(model, ORIGINAL), key(model, recipe)
