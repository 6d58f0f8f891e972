"""Atomic writes, content hashes and exclusive locks (filelock's, an flock on Unix, released by
the kernel when a run is killed): the pieces that keep a killed run honest."""

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from pipeline.core.errors import UserError


def write_json_atomic(path: Path, data: object) -> None:
    """Write to a temporary file beside `path`, fsync, rename: readers never see half a file."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """As write_json_atomic, for text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_folder(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def staging_dir(final: Path) -> Iterator[Path]:
    """A temporary folder that becomes `final` only if the block finishes.

    The folder is named `.<name>.partial-<pid>` so a crash leaves nothing that looks finished;
    stale ones from killed runs are removed on the next attempt.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    # a killed run's half-written folder; or, killed between the two renames below, the
    # previous `final` (its manifest entry already said "running": nothing marked done is lost)
    for pattern in (f".{final.name}.partial-*", f".{final.name}.old-*"):
        for stale in final.parent.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = final.parent / f".{final.name}.partial-{os.getpid()}"
    tmp.mkdir()
    try:
        yield tmp
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str) -> Iterator[None]:
    """Fail fast (exit 2) when another process holds the lock, instead of corrupting its work."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise UserError(f"{what} is in use by another process (lock {path})") from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def waiting_lock(path: Path) -> Iterator[None]:
    """Wait for the lock: for shared caches that a second process should reuse, not fail on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path):
        yield


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_folder(folder: Path) -> None:
    """A rename is durable once its folder is synced: a host crash after it otherwise can
    leave the old name, or none."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_json(data: object) -> str:
    return sha256_text(json.dumps(data, sort_keys=True, default=str))


def hash_folder(folder: Path, full_limit: int = 256 * 2**20) -> str:
    """Content hash of a model folder. Files over `full_limit` bytes (multi-GB shards) are
    identified by name, size and their first and last MiB, so a 70B folder hashes in seconds."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        # hidden files, and bytecode: a local lm-eval task's `!function utils.x` writes
        # __pycache__/ on its first run, which must not change what the folder's hash says
        if rel.startswith(".") or "/." in rel or "__pycache__" in rel.split("/"):
            continue
        size = path.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with open(path, "rb") as f:
            if size <= full_limit:
                for chunk in iter(lambda: f.read(2**20), b""):
                    h.update(chunk)
            else:
                h.update(f.read(2**20))
                f.seek(-(2**20), os.SEEK_END)
                h.update(f.read(2**20))
    return h.hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def is_file(path: Path) -> bool:
    """Path.is_file, False also for a name the OS refuses (too long, a NUL byte): user input."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False
