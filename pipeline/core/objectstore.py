"""Run folders in object storage: RUNS_DIR=s3://bucket/prefix (an object store fsspec writes,
paths.STORES; S3 through s3fs, credentials and endpoint as boto reads them: AWS_* variables,
~/.aws).

Stages work in a local mirror of each run folder (under the cache: mirror_root); every call
here is given the store and the mirror it syncs (core/runs.py: the Runs the entry point made
hands them down). The store holds a folder by content, as git, DVC, huggingface_hub and OCI
registries do:

    <root>/.objects/sha256/ab/ab12…        the bytes of every file, named by their sha256
    <root>/<model>/<recipe>/manifest.json  the folder's manifest, and under "objectstore" the
                                           map of every file it covers: path → sha256, size

A commit (push) uploads the content the store does not hold yet, then the manifest: the one
atomic pointer of the folder (an S3 PUT is whole or absent, and read-after-write consistent).
What the store holds is looked at, never assumed from a stored file map (stored_objects):
before the manifest and again after it lands, each of the folder's objects once per process
(forget_checks: `--force` looks again), what is missing or wrong uploaded again.
A commit killed halfway leaves the previous version; a file rewritten in place with the same
size (`--force`, a recipe edit) is new content under a new name. A reader (pull) fetches the
manifest first, then exactly the objects it names, each checked against its sha256 before it
is renamed into place: whatever commits meanwhile, it gets one committed version. Files the
mirror synced before and the manifest no longer names are removed; files it never synced are
this machine's own work and stay (a fresh mirror holds only what the manifest names).

On S3 the manifest is written only over the version the commit read (If-Match; If-None-Match
where there was none): a commit that lost a race reads again and merges again. Folders without
a manifest of their own (`<model>/original`, the nightly's recipes and logs, written by cells
on several nodes at once) keep every machine's additions (the record of what a mirror synced
holds only its own files: deleted means this mirror had it and removed it); a run folder's
manifest is the last committer's, as before (the nightly runs the cells of one run folder one
after another). The transport (the store, deadlines, conditional writes) is store_transport's.

`pull(…, weights=False)`: manifests and results only, not `artifact/` nor tensors (advise,
clean-cache); what it left out stays in the next commit unless its folder was pruned. Pruning
commits like any write (the manifest drops the files); `collect_garbage` (`make clean-cache`)
deletes the objects no manifest names once older than GC_MIN_AGE_S. A hidden record per
mirrored folder keeps its files' hashes by size, mtime, ctime and inode, so a cached pull
does not re-read gigabytes; size alone is never trusted. Hidden names (staging folders, locks,
temporary files, the record) never travel. Every S3 request has a deadline (S3_TRANSPORT);
a failure is one line naming RUNS_DIR (StoreError, exit 1). A stored manifest from before
content addressing (no file map) is said once and ignored: the next commit stores it anew.
"""

import functools
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TypeGuard

from pipeline.core import secrets, stored_objects
from pipeline.core import store_transport as transport
from pipeline.core.errors import UserError
from pipeline.core.files import sha256_file, write_json_atomic
from pipeline.core.store_transport import MANIFEST, OBJECTS, StoreError

__all__ = [
    "StoreError",
    "collect_garbage",
    "commit_pruned",
    "forget_checks",
    "pull",
    "push",
]

KEY = "objectstore"  # the file map's key in a stored manifest; the local copy has none
LAYOUT = "sha256-v1"
RECORD = ".objectstore.json"  # per mirrored folder: the manifest it was synced with, hashes
# a writer uploads its objects before its manifest: GC spares objects younger than this, and
# a commit re-uploads an unreferenced object older than half of it (so no GC takes it then)
GC_MIN_AGE_S = 24 * 3600
COMMIT_TRIES = 8  # commits of one folder racing each other: each retry merges anew
# (root, sha256) checked held by this process after a manifest naming it landed: its later
# commits need not look again while the stored manifest still names it
_CHECKED: set[tuple[str, str]] = set()
WEIGHTS = (".safetensors", ".pt", ".pth", ".bin", ".npy", ".gguf")  # and all of artifact/


def pull(remote: str, mirror: Path, rel: str, *, weights: bool = True) -> None:
    """Fetch the run folders stored at `remote` at or under `rel` into `mirror`, each exactly
    as its stored manifest names it. weights=False: no `artifact/`, no tensors. No-op where
    nothing is stored yet."""
    store = transport.open_store(remote)
    with transport.failing(store, f"fetching {rel or 'the run folders'}"):
        for unit in _units(store, rel):
            _pull_unit(store, unit, mirror / unit, weights)


def push(remote: str, mirror: Path, rel: str, *, if_unchanged: bool = False) -> bool:
    """Commit `rel` from `mirror` to `remote`: content the store lacks, then its manifest.
    if_unchanged: not where another machine committed since this mirror synced (False then)."""
    local = mirror / rel
    if not local.is_dir():
        return False
    store = transport.open_store(remote)
    with transport.failing(store, f"committing {rel}"):
        return _push_unit(store, rel, local, if_unchanged)


def forget_checks() -> None:
    """Look at every object in the store again at the next commits (`--force`)."""
    _CHECKED.clear()


def commit_pruned(remote: str, mirror: Path, min_age_s: float = GC_MIN_AGE_S) -> list[str]:
    """After a local prune (`make clean-cache`, on a mirror pulled just before): commit every
    mirrored folder, then collect garbage. Lines for people."""
    skipped = []
    for record in sorted(mirror.rglob(RECORD)):
        rel = record.parent.relative_to(mirror).as_posix()
        if _busy(record.parent) or not push(remote, mirror, rel, if_unchanged=True):
            skipped.append(rel)
    lines = [f"skipped   {rel}: being written here, or committed from elsewhere meanwhile"
             for rel in skipped]  # fmt: skip
    count, size = collect_garbage(remote, min_age_s)
    hours = min_age_s / 3600
    lines.append(f"store     {secrets.url(remote)}: {count} unreferenced objects deleted "
                 f"({size / 2**20:.1f} MiB); younger than {hours:g} h kept")  # fmt: skip
    return lines


def collect_garbage(remote: str, min_age_s: float = GC_MIN_AGE_S) -> tuple[int, int]:
    """Delete the objects no stored manifest under `remote` names and older than `min_age_s`
    (a writer may have uploaded objects whose manifest is not written yet). (count, bytes).

    A writer re-uploads an unnamed object older than half of that before its manifest names it
    (the same bytes redone after an old aborted commit): so each candidate is looked at again
    at delete time, its age and the manifests both, and a commit checks every object it names
    once its manifest has landed (re-uploading one taken meanwhile). What remains is a writer
    whose re-upload, manifest and check all fall within one candidate's last look and its
    delete: a reader then says the object is missing, and the next commit from a new process
    (`--force`) puts it back."""
    store = transport.open_store(remote)
    with transport.failing(store, "collecting unreferenced objects"):
        prefix = f"{store.root}/{OBJECTS}"
        store.fs.invalidate_cache(prefix)
        found = store.fs.find(prefix, detail=True)  # first: what is uploaded later is spared
        named = _referenced(store)
        candidates = [k for k, i in found.items() if _sha_of(k) not in named and _old(i, min_age_s)]
        looked = {key: stored_objects.info(store.fs, key) for key in candidates}  # again, now
        still_old = {key: info for key, info in looked.items() if _old(info, min_age_s)}
        named = _referenced(store) if still_old else named  # manifests landed meanwhile
        doomed = {key: info for key, info in still_old.items() if _sha_of(key) not in named}
        if doomed:
            store.fs.rm(sorted(doomed))
        return len(doomed), sum(info.get("size") or 0 for info in doomed.values())


def _old(info: dict | None, min_age_s: float) -> TypeGuard[dict]:  # True: an entry
    return info is not None and stored_objects.age_s(info) >= min_age_s


def _sha_of(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _units(store: transport.Store, rel: str) -> list[str]:
    """The folders with a stored manifest at or under `rel`; files of the layout before
    content addressing are said once and ignored."""
    base = store.key(rel)
    store.fs.invalidate_cache(base)
    if rel:
        keys = store.fs.find(base)
    else:  # the root: its run folders, not the objects
        try:
            tops = store.fs.ls(base, detail=False)
        except FileNotFoundError:  # nothing stored yet
            return []
        keys = [
            k for top in tops if not _hidden(top.rsplit("/", 1)[-1]) for k in store.fs.find(top)
        ]
    inner = [k[len(store.root) + 1 :] for k in keys if k.startswith(base + "/") or not rel]
    inner = [k for k in inner if not _hidden(k)]
    units = sorted(k[: -len(MANIFEST)].rstrip("/") for k in inner if k.split("/")[-1] == MANIFEST)
    if others := [k for k in inner if k.split("/")[-1] != MANIFEST]:
        _say(f"{store.shown()}: {len(others)} files under {rel or 'the root'} were stored "
             "before content addressing (not named by any manifest): ignored")  # fmt: skip
    return units


# --- the stored manifest ----------------------------------------------------------------------


@dataclass
class _Pointer:
    manifest: dict | None  # the folder's manifest.json; None where the folder has none
    files: dict[str, dict]  # path → {"sha256", "size"}


def _parse(store: transport.Store, rel: str, raw: bytes, quiet: bool = False) -> _Pointer | None:
    """The stored manifest read; None where it predates content addressing (said once)."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise StoreError(
            f"{store.shown()}: {rel}/{MANIFEST} is not JSON ({transport.why(e)})"
        ) from None
    block = data.pop(KEY, None) if isinstance(data, dict) else None
    if not isinstance(block, dict):
        if not quiet:
            _say(f"{store.shown()}: {rel}/{MANIFEST} predates content addressing (no file map): "
                 "ignored; the next commit from a mirror stores the folder anew")  # fmt: skip
        return None
    if block.get("layout") != LAYOUT:
        raise UserError(f"{store.shown()}: {rel}/{MANIFEST} has layout {block.get('layout')!r}, "
                        f"this checkout reads {LAYOUT}: update it")  # fmt: skip
    files = block.get("files") or {}
    for inner, meta in files.items():
        if not _safe(inner) or not isinstance(meta, dict) or len(str(meta.get("sha256"))) != 64:
            raise StoreError(f"{store.shown()}: {rel}/{MANIFEST} names {inner!r}: not a file map")
    return _Pointer(data if block.get("manifest") else None, files)


def _encode(manifest: dict | None, files: dict[str, dict]) -> bytes:
    block = {
        "layout": LAYOUT,
        "manifest": manifest is not None,
        "files": dict(sorted(files.items())),
    }
    return (json.dumps({**(manifest or {}), KEY: block}, indent=2) + "\n").encode()


def _safe(inner: str) -> bool:
    """A path that stays inside its folder and is not hidden (nothing else is ever stored)."""
    path = PurePosixPath(inner)
    return bool(inner) and not path.is_absolute() and ".." not in path.parts and not _hidden(inner)


# --- the mirror's record ----------------------------------------------------------------------


@dataclass
class _Record:
    """What a mirrored folder was last synced with, and its files' hashes by stat."""

    pointer: str | None = None  # sha256 of the stored manifest's bytes
    synced: dict[str, dict] = field(default_factory=dict)  # the file map then
    skipped: dict[str, bool] = field(default_factory=dict)  # not fetched: did its folder exist
    hashes: dict[str, list] = field(default_factory=dict)  # path → [stat key…, sha256]

    @classmethod
    def load(cls, local: Path) -> "_Record":
        try:
            data = json.loads((local / RECORD).read_text())
            return cls(data["pointer"], data["synced"], data["skipped"], data["hashes"])
        except (OSError, ValueError, KeyError, TypeError):
            return cls()  # none, or unreadable: everything is hashed again

    def save(self, local: Path) -> None:
        live = {k: v for k, v in self.hashes.items() if (local / k).is_file()}
        data = {"pointer": self.pointer, "synced": self.synced, "skipped": self.skipped,
                "hashes": live}  # fmt: skip
        write_json_atomic(local / RECORD, data)

    def sha256(self, path: Path, inner: str) -> str:
        """The file's sha256: from the record where size, mtime, ctime and inode are as
        recorded, else read."""
        key = _stat_key(path)
        known = self.hashes.get(inner)
        if known and known[:-1] == key:
            return known[-1]
        return self.remember(path, inner, sha256_file(path))

    def remember(self, path: Path, inner: str, sha: str) -> str:
        self.hashes[inner] = [*_stat_key(path), sha]
        return sha

    def holds(self, path: Path, inner: str, meta: dict) -> bool:
        """Whether the mirror's file has this content (never by its size alone)."""
        if not path.is_file() or path.stat().st_size != meta["size"]:
            return False
        return self.sha256(path, inner) == meta["sha256"]


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


# --- pull -------------------------------------------------------------------------------------


def _pull_unit(store: transport.Store, rel: str, local: Path, weights: bool) -> None:
    read = transport.read_pointer(store, rel)
    if read is None or (pointer := _parse(store, rel, read.raw)) is None:
        return
    if _busy(local):  # a process here holds the folder's lock: it is writing, then commits
        return
    record = _Record.load(local)
    left = [
        i
        for i, m in sorted(pointer.files.items())
        if not _place(store, rel, local, i, m, record, weights)
    ]
    if pointer.manifest is not None and _local_manifest(local) != pointer.manifest:
        write_json_atomic(local / MANIFEST, pointer.manifest)  # after its files
    _drop_unnamed(local, pointer.files, record)
    record.pointer, record.synced = _digest(read.raw), pointer.files
    record.skipped = {inner: (local / inner).parent.is_dir() for inner in left}
    record.save(local)


def _place(store: transport.Store, rel: str, local: Path, inner: str, meta: dict, record: _Record,
           weights: bool) -> bool:  # fmt: skip
    """Make the mirror's file this content; False where it is a weight left out."""
    target = local / inner
    if record.holds(target, inner, meta):
        return True
    if not weights and _is_weight(inner):
        if inner in record.synced and target.is_file():
            target.unlink()  # an older version's weights: absent rather than stale
        return False
    _fetch(store, f"{rel}/{inner}", meta, target)
    record.remember(target, inner, meta["sha256"])  # checked by _fetch: not read again
    return True


def _fetch(store: transport.Store, what: str, meta: dict, target: Path) -> None:
    """Download one object beside `target` under a hidden name, check its sha256, rename."""
    sha = meta["sha256"]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.fetching-{os.getpid()}")
    try:
        try:
            store.fs.get_file(store.object(sha), str(partial))
        except FileNotFoundError:
            raise StoreError(f"{store.shown()}: {what} (sha256 {sha[:12]}…) is named by its "
                             "manifest but not held by the store") from None  # fmt: skip
        if (found := sha256_file(partial)) != sha:
            raise StoreError(f"{store.shown()}: {what}: object {sha[:12]}… holds other bytes "
                             f"(sha256 {found[:12]}…): not used")  # fmt: skip
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _drop_unnamed(local: Path, files: dict[str, dict], record: _Record) -> None:
    """Remove what this mirror synced before and the manifest no longer names, where it is
    still as synced (what this machine wrote since is its own, unpushed work)."""
    for inner, meta in record.synced.items():
        target = local / inner
        if inner in files or not target.is_file():
            continue
        if record.sha256(target, inner) == meta["sha256"]:
            target.unlink()
            _remove_empty(target.parent, local)


def _remove_empty(folder: Path, stop: Path) -> None:
    while folder != stop and folder.is_relative_to(stop):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _busy(local: Path) -> bool:
    """Whether another process holds the folder's lock (RunDir.lock) now."""
    import fcntl

    try:
        fd = os.open(local / ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _is_weight(inner: str) -> bool:
    return inner.startswith("artifact/") or inner.endswith(WEIGHTS)


# --- push -------------------------------------------------------------------------------------


def _push_unit(store: transport.Store, rel: str, local: Path, if_unchanged: bool) -> bool:
    record = _Record.load(local)
    manifest = _local_manifest(local)
    files = _scan(local, record)
    for _ in range(COMMIT_TRIES):  # a commit that lost a race reads again and merges again
        try:
            body, committed, unchecked = _commit_once(store, rel, local, record, manifest, files,
                                                      if_unchanged)  # fmt: skip
        except transport.Conflict:
            continue
        if body is None:
            return False
        break
    else:
        raise StoreError(f"{store.shown()}: committing {rel}: {COMMIT_TRIES} other commits "
                         "replaced its manifest meanwhile; try again")  # fmt: skip
    for inner, meta in sorted(unchecked.items()):  # a GC that listed before it landed
        _ensure(store, local / inner, meta["sha256"], refresh=False)
        _CHECKED.add((store.root, meta["sha256"]))
    # what this mirror synced: its own files, and the weights its pull left in the store; not
    # what other machines added (a merge), which it never had and so can never have removed
    kept_remote = _kept_remote(local, record, files)
    record.pointer = _digest(body)
    record.synced = {k: m for k, m in committed.items() if k in files or k in kept_remote}
    record.skipped = {k: v for k, v in record.skipped.items() if k in committed and k not in files}
    record.save(local)
    return True


def _commit_once(
    store: transport.Store, rel: str, local: Path, record: _Record, manifest: dict | None,
    files: dict[str, dict], if_unchanged: bool,
) -> tuple[bytes | None, dict, dict]:  # fmt: skip
    """One try: the content the store lacks, then the manifest (transport.Conflict where
    another commit landed first). (body, committed, unchecked); body None where if_unchanged
    and another machine committed since this mirror synced."""
    read = transport.read_pointer(store, rel)
    if if_unchanged and read is not None and _digest(read.raw) != record.pointer:
        return None, {}, {}
    stored = _parse(store, rel, read.raw, quiet=True) if read is not None else None
    committed = {**_kept(store, local, record, files, manifest, stored), **files}
    named = {m["sha256"] for m in stored.files.values()} if stored else set()
    unchecked = {i: m for i, m in files.items() if (store.root, m["sha256"]) not in _CHECKED
                 or m["sha256"] not in named}  # fmt: skip
    for inner, meta in sorted(unchecked.items()):  # the store's copy, never its file map
        held = _ensure(store, local / inner, meta["sha256"], refresh=meta["sha256"] not in named)
        if held != meta:  # written since the scan (a log still appended): what was stored
            files[inner] = committed[inner] = unchecked[inner] = held
    body = _encode(manifest, committed)
    if read is None or _digest(body) != _digest(read.raw):  # else stored as it is
        transport.write_pointer(store, rel, body, read)  # last: the commit
    return body, committed, unchecked


def _kept(
    store: transport.Store,
    local: Path,
    record: _Record,
    files: dict[str, dict],
    manifest: dict | None,
    stored: _Pointer | None,
) -> dict[str, dict]:
    """What the commit names besides the mirror's files: weights a metadata-only pull left
    in the store, and in a folder without a manifest (a cache, the nightly's logs) what other
    machines added since this one synced — where the store still holds it."""
    kept = _kept_remote(local, record, files)
    if manifest is None and stored is not None:
        kept |= {k: m for k, m in stored.files.items() if k not in files and k not in record.synced}
    held = {m["sha256"] for m in stored.files.values()} if stored else set()
    return {k: m for k, m in kept.items() if m["sha256"] in held or _info(store, m["sha256"])}


def _scan(local: Path, record: _Record) -> dict[str, dict]:
    """The folder's files (not hidden, not its manifest, not a nested mirrored folder's) with
    their sha256 and size."""
    found = {}
    for folder, dirs, names in os.walk(local):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not _hidden(d) and not (here / d / RECORD).exists())
        for name in names:
            path = here / name
            inner = path.relative_to(local).as_posix()
            if _hidden(name) or inner == MANIFEST or not path.is_file():
                continue
            try:
                found[inner] = {"sha256": record.sha256(path, inner), "size": path.stat().st_size}
            except FileNotFoundError:  # replaced or removed since listed: not this commit's
                continue
    return found


def _kept_remote(local: Path, record: _Record, files: dict[str, dict]) -> dict[str, dict]:
    """What a pull with weights=False left in the store: still committed while its folder is
    as that pull left it (a pruned or rewritten folder decides for itself)."""
    return {
        inner: record.synced[inner]
        for inner, existed in record.skipped.items()
        if inner not in files and inner in record.synced
        and (local / inner).parent.is_dir() == existed
    }  # fmt: skip


def _local_manifest(local: Path) -> dict | None:
    path = local / MANIFEST
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object")
    data.pop(KEY, None)
    return data


def _ensure(store: transport.Store, path: Path, sha: str, refresh: bool) -> dict:
    """Make the store hold `path`'s content under its hash, checked there (size, the sha256
    the object states, and MD5 where the store states one), not assumed from a manifest.
    refresh: an object no stored manifest names is uploaded again when over half the GC's age
    (so no GC takes it then). The content held: {"sha256", "size"} (stored_objects.upload:
    other than `sha` where the file was written since it was hashed)."""
    key = store.object(sha)
    found = stored_objects.info(store.fs, key)
    if stored_objects.holds(found, path, store.root, sha) and not (
        refresh and stored_objects.age_s(found) >= GC_MIN_AGE_S / 2
    ):
        return {"sha256": sha, "size": found["size"]}
    return stored_objects.upload(store.fs, store.object, path, store.root, sha)


def _info(store: transport.Store, sha: str) -> dict | None:
    return stored_objects.info(store.fs, store.object(sha))


# --- small things -----------------------------------------------------------------------------


def _referenced(store: transport.Store) -> set[str]:
    """Every sha256 a stored manifest under the root names."""
    named = set()
    for unit in _units(store, ""):
        read = transport.read_pointer(store, unit)
        pointer = _parse(store, unit, read.raw, quiet=True) if read is not None else None
        if pointer is not None:
            named |= {m["sha256"] for m in pointer.files.values()}
    return named


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _hidden(inner: str) -> bool:
    return any(part.startswith(".") for part in inner.split("/"))


@functools.cache
def _say(line: str) -> None:
    """A note on stderr, once per process (stdout may be a command's JSON)."""
    print(f"note: {line}", file=sys.stderr)
