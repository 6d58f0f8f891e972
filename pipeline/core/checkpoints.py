"""What a long stage keeps as each unit of its work finishes (a decoder layer, a shard), so that a
run killed part-way is resumed, not restarted.

They live beside the stage's staging folder, never where a finished result is looked for:

    runs/<model>/<recipe>/artifact.checkpoints/progress.json   the stage's fingerprint and
                                                               inputs, each unit done and its time
    runs/<model>/<recipe>/artifact.checkpoints/<unit file>     written whole, then renamed

A unit counts as done only once its file is synced, renamed into place (the folder synced too)
and progress.json names it with its sha256, so a kill at any moment leaves either a whole unit
or none; a host crash that tears a file anyway (a disk that lied about its sync, a copy cut
short) is caught when the next attempt opens them: a unit whose bytes do not match its sha256
is discarded, said in one line, and its work redone. The runner (core/stage.py)
opens them with the stage's fingerprint: another fingerprint (the inputs, a library version, the
path changed) or `--force` discards them and says why; a finished stage removes them.

The folder's name is not hidden, so that it travels with its run folder in object storage: the
runner commits the run folder as each unit is kept (`on_keep`), and whichever machine picks the
stage up next (a nightly cell retried on another node) pulls them with it and resumes.
"""

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from pipeline.core.files import fsync_file, fsync_folder, sha256_file, write_json_atomic

PROGRESS = "progress.json"


class Checkpoints:
    def __init__(
        self,
        folder: Path,
        fingerprint: str,
        inputs: dict,
        discarded: str | None = None,
        writes: bool = True,
    ):
        self.folder, self.fingerprint, self.inputs = folder, fingerprint, inputs
        # False: a reader of another process's units (torchrun's ranks beside rank 0): it
        # follows begin() and keep() in memory, as the writer does on disk, and writes nothing
        self.writes = writes
        self.discarded = discarded  # why an earlier attempt's were discarded, to be said
        self.on_keep: Callable[[], None] | None = None  # after each unit: commit it elsewhere
        self._lock = threading.Lock()  # the model-free path finishes shards from worker threads
        found = _read(folder / PROGRESS)
        self._done: dict[str, dict] = found.get("done", {}) if found else {}
        self.total: int | None = found.get("total") if found else None
        self.kind: str | None = found.get("kind") if found else None
        self.replay: dict | None = found.get("replay") if found else None
        self.resumed: dict | None = None  # where a resumed run started (quantize/resume.py)

    @classmethod
    def beside(cls, final: Path, fingerprint: str, inputs: dict, force: bool) -> "Checkpoints":
        """The checkpoints of the stage writing `final`; `.discarded` says why an earlier
        attempt's were discarded (None: nothing was, or there were none)."""
        folder = final.parent / f"{final.name}.checkpoints"
        found = _read(folder / PROGRESS)
        said = None
        if found and (force or found.get("fingerprint") != fingerprint):
            units = len(found.get("done", {}))
            why = "--force" if force else "its inputs differ (" + _changed(found, inputs) + ")"
            said = (
                f"not resuming: {units} {found.get('kind') or 'unit'}(s) of an earlier attempt "
                f"discarded: {why}"
            )
            shutil.rmtree(folder, ignore_errors=True)
        elif folder.exists() and not found:  # killed before its first unit: nothing to keep
            shutil.rmtree(folder, ignore_errors=True)
        for half in folder.glob("**/.*.tmp-*"):  # a unit killed as it was written
            half.unlink(missing_ok=True)
        kept = cls(folder, fingerprint, inputs, said)
        if torn := kept._drop_torn():
            kept.discarded = "\n".join(filter(None, [said, torn]))
        return kept

    def done(self) -> dict[str, dict]:
        """The units done, in the order they finished: {name: {"seconds": …, "file": …}}."""
        return dict(self._done)

    def path(self, name: str) -> Path:
        return self.folder / self._done[name]["file"]

    def begin(self, kind: str, total: int) -> None:
        """What the units are and how many there are: a different count than an earlier
        attempt's (another model or split) starts over."""
        with self._lock:
            if self.total not in (None, total) or self.kind not in (None, kind):
                if self.writes:
                    shutil.rmtree(self.folder, ignore_errors=True)
                self._done = {}
            self.kind, self.total = kind, total
            if self.writes:
                self._save()

    def replay_on(self, record: dict) -> str | None:
        """Units are replayed bit for bit only where they were made alike: `record` says how
        (device, dtype, torch). Kept under another record, they are discarded: the reason, in
        one line (None: kept here, or none kept)."""
        with self._lock:
            before, units = self.replay, len(self._done)
            self.replay = record
            if before in (None, record) or not units:
                self._save()
                return None
            shutil.rmtree(self.folder, ignore_errors=True)
            self._done = {}
            self._save()
        moved = ", ".join(f"{k} {before.get(k)} → {record.get(k)}" for k in sorted(record)
                          if before.get(k) != record.get(k))  # fmt: skip
        return (
            f"not resuming: {units} {self.kind or 'unit'}(s) of an earlier attempt discarded: "
            f"kept under another {moved} (replay would match neither run)"
        )

    def keep(
        self, name: str, file: str, write: Callable[[Path], None], seconds: float, **about
    ) -> None:
        """Record unit `name` as done: `write(tmp)` writes its file, renamed to `file`;
        `about`: what else to record of it."""
        if not self.writes:  # the writer keeps it: recorded here as it will be there
            with self._lock:
                self._done[name] = {"seconds": round(seconds, 3), "file": file, **about}
            return
        target = self.folder / file
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        target.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        fsync_file(tmp)
        sha = sha256_file(tmp)
        os.replace(tmp, target)
        fsync_folder(target.parent)
        with self._lock:
            self._done[name] = {"seconds": round(seconds, 3), "file": file, "sha256": sha, **about}
            self._save()
            if self.on_keep:
                self.on_keep()

    def _drop_torn(self) -> str | None:
        """Forget each unit whose file is missing or whose bytes are not those kept (a torn
        write, a corrupted copy): its work is redone. Says which, in one line."""
        torn = []
        for name, unit in list(self._done.items()):
            path = self.folder / unit["file"]
            if not path.is_file():
                torn.append((name, unit["file"], "missing"))
            elif unit.get("sha256") and sha256_file(path) != unit["sha256"]:
                torn.append((name, unit["file"], "sha256 differs"))
        if not torn:
            return None
        for name, file, _ in torn:
            (self.folder / file).unlink(missing_ok=True)
            del self._done[name]
        self._save()
        which = ", ".join(f"{file} ({why})" for _, file, why in torn)
        return f"kept {self.kind or 'unit'}(s) discarded and redone: {which}"

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _save(self) -> None:
        write_json_atomic(
            self.folder / PROGRESS,
            {
                "fingerprint": self.fingerprint,
                "inputs": self.inputs,
                "kind": self.kind,
                "total": self.total,
                "replay": self.replay,
                "done": self._done,
            },  # fmt: skip
        )


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _changed(found: dict, inputs: dict) -> str:
    """Which of the stage's inputs differ from the earlier attempt's, by name."""
    before = found.get("inputs") or {}
    keys = sorted(k for k in set(before) | set(inputs) if before.get(k) != inputs.get(k))
    if "libraries" in keys:
        libraries = before.get("libraries") or {}
        now = inputs.get("libraries") or {}
        moved = [f"{k} {libraries.get(k)} → {now.get(k)}" for k in sorted(now) if
                 libraries.get(k) != now.get(k)]  # fmt: skip
        keys[keys.index("libraries")] = ", ".join(moved) or "libraries"
    return ", ".join(keys) or "fingerprint"
