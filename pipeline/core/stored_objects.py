"""Whether the store holds one content-addressed object whole, and making it so: what a commit
checks for every file its manifest names, before the manifest lands and again after.

Held means present with the file's size and, where the store says its MD5 (S3's ETag of an
object uploaded in one part, every file under s3fs's multipart threshold), with its bytes.
A store whose ETags are no MD5 (SSE-KMS, some S3-compatible servers) is noticed when a fresh
upload disagrees with its own file, and then judged by size alone.
"""

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_MD5_ETAGS_LIE: set[str] = set()  # roots whose ETags proved not to be MD5s, this process
# A file this small is read once and sent from memory: the bytes hashed are the bytes stored (a
# log still being appended, as a nightly cell's beside another cell that commits the folder,
# changes between a scan and an upload). Larger files (weights) are written whole and renamed.
READ_ONCE_MAX = 64 * 2**20


def info(fs: Any, key: str) -> dict | None:
    """The store's entry for `key` now (never a cached listing), None where it has none."""
    fs.invalidate_cache(key.rsplit("/", 1)[0])
    try:
        return fs.info(key)
    except FileNotFoundError:
        return None


def holds(found: dict | None, path: Path, root: str) -> bool:
    """Whether the entry `found` is the content of `path`."""
    if found is None or found.get("size") != path.stat().st_size:
        return False
    md5 = _md5_of(found)
    return md5 is None or root in _MD5_ETAGS_LIE or md5 == _md5(path)


def upload(fs: Any, key_of: Callable[[str], str], path: Path, root: str, sha256: str) -> dict:
    """Put `path`'s content at key_of(its sha256), and learn whether this store's ETags are MD5s
    (they stay a hint). {"sha256", "size"} of what was stored: a small file's bytes as read now,
    where it was written since it was hashed as `sha256`."""
    if path.stat().st_size <= READ_ONCE_MAX:
        data = path.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        fs.pipe_file(key_of(sha256), data)
        sent, size = hashlib.md5(data).hexdigest(), len(data)
    else:
        fs.put_file(str(path), key_of(sha256))
        sent, size = _md5(path), path.stat().st_size
    md5 = _md5_of(info(fs, key_of(sha256)) or {})
    if md5 is not None and md5 != sent:
        _MD5_ETAGS_LIE.add(root)
    return {"sha256": sha256, "size": size}


def age_s(found: dict, now: float | None = None) -> float:
    """Seconds since the object was written; 0 where the store does not say (never old)."""
    stamp = found.get("LastModified") or found.get("mtime") or found.get("created")
    if stamp is None:
        return 0.0
    seconds = stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)
    return max(0.0, (time.time() if now is None else now) - seconds)


def _md5_of(found: dict) -> str | None:
    """The MD5 an S3 ETag states: a single-part upload's; a multipart one's ("…-N") is none."""
    etag = str(found.get("ETag") or found.get("etag") or "").strip('"').lower()
    if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag):
        return etag
    return None


def _md5(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()
