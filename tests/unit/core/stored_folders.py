"""Run folders as the object-store tests write and read them: a version of a folder in a
mirror, what a reader sees of it, what the store holds."""

import hashlib
import json
from pathlib import Path

from pipeline.core import store_transport
from pipeline.core.rundir import RunDir
from pipeline.core.runs import Runs

REL = "m/fp8"


def opened(model: str, recipe: str) -> RunDir:
    """A run folder as a stage opens it on this "machine" (RUNS_DIR and PIPELINE_CACHE as set
    now): pulled, then every manifest write committed through the same Runs."""
    runs = Runs.from_env()
    runs.pull_run(model, recipe)
    return RunDir(model, recipe, runs)


def write(mirror: Path, files: dict[str, bytes], manifest: dict | None, rel: str = REL) -> None:
    """A version of a run folder in a mirror: these files (others removed), this manifest."""
    folder = mirror / rel
    for path in tree(folder):
        if path != "manifest.json" and path not in files:
            (folder / path).unlink()
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    if manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest))


def tree(folder: Path) -> dict[str, bytes]:
    """What a mirror's folder shows a reader: its files that are not hidden (the manifest
    parsed)."""
    found = {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(s.startswith(".") for s in p.relative_to(folder).parts)
    }
    if "manifest.json" in found:  # as the stage reads it
        found["manifest.json"] = json.loads(found["manifest.json"])
    return found


def stored_manifest(url: str, rel: str = REL) -> dict:
    store = store_transport.open_store(url)
    return json.loads(store.fs.cat_file(store.pointer(rel)))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_keys(url: str) -> list[str]:
    store = store_transport.open_store(url)
    store.fs.invalidate_cache()
    return sorted(k.removeprefix(store.root + "/") for k in store.fs.find(store.root))
