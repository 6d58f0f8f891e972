"""Whether the store holds one content-addressed object whole, and making it so: what a commit
checks for every file its manifest names, before the manifest lands and again after.

Held means present with the file's size and the sha256 it was stored with: S3 keeps it in the
object's metadata (`x-amz-meta-sha256`, set by every upload here, single-part or multipart, and
lost by any write that did not come from here), so an object of any size whose bytes were
replaced is not held and the commit uploads it again. Where the ETag is an MD5 (an object
uploaded in one part) the file's MD5 must match it too. An object without that metadata (stored
before it was kept) is held by its MD5 where it has one, else uploaded once more. A store whose
ETags are no MD5 (SSE-KMS, some S3-compatible servers) is noticed when a fresh upload disagrees
with its own file; its MD5s are then ignored. Stores other than S3 are judged by size.
"""

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

_MD5_ETAGS_LIE: set[str] = set()  # roots whose ETags proved not to be MD5s, this process
# A file this small is read once and sent from memory: the bytes hashed are the bytes stored (a
# log still being appended, as a nightly cell's beside another cell that commits the folder,
# changes between a scan and an upload). Larger files (weights) are written whole and renamed.
READ_ONCE_MAX = 64 * 2**20
PART_BYTES = 50 * 2**20  # s3fs's part size: a file of 2 parts or more is a multipart upload
SHA256_KEY = "sha256"  # the object's metadata entry (S3 shows it as x-amz-meta-sha256)


def info(fs: Any, key: str) -> dict | None:
    """The store's entry for `key` now (never a cached listing), None where it has none."""
    fs.invalidate_cache(key.rsplit("/", 1)[0])
    try:
        if not _s3(fs):
            return fs.info(key)
        bucket, name, _ = fs.split_path(key)
        out = fs.call_s3("head_object", Bucket=bucket, Key=name)  # fs.info leaves out Metadata
    except FileNotFoundError:
        return None
    return {
        "size": out["ContentLength"],
        "ETag": out.get("ETag"),
        "LastModified": out.get("LastModified"),
        "Metadata": out.get("Metadata") or {},
    }


def holds(found: dict | None, path: Path, root: str, sha256: str) -> TypeGuard[dict]:
    """Whether the entry `found` is the content of `path`, whose sha256 is `sha256`."""
    if found is None or found.get("size") != path.stat().st_size:
        return False
    stated = (found.get("Metadata") or {}).get(SHA256_KEY)
    if stated is not None and stated != sha256:
        return False
    md5 = _md5_of(found)
    if md5 is not None and root not in _MD5_ETAGS_LIE:
        return md5 == _md5(path)
    return stated is not None or "Metadata" not in found  # S3 without either: upload it again


def upload(fs: Any, key_of: Callable[[str], str], path: Path, root: str, sha256: str) -> dict:
    """Put `path`'s content at key_of(its sha256), and learn whether this store's ETags are MD5s
    (they stay a hint). {"sha256", "size"} of what was stored: a small file's bytes as read now,
    where it was written since it was hashed as `sha256`."""
    if path.stat().st_size <= READ_ONCE_MAX:
        data = path.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        fs.pipe_file(key_of(sha256), data, **_stated(fs, sha256))
        sent, size = hashlib.md5(data).hexdigest(), len(data)
    else:
        parts = {"chunksize": PART_BYTES} if _s3(fs) else {}
        fs.put_file(str(path), key_of(sha256), **parts, **_stated(fs, sha256))
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


def _s3(fs: Any) -> bool:
    return hasattr(fs, "call_s3")


def _stated(fs: Any, sha256: str) -> dict:
    """What an upload passes so that the object states its sha256 (S3's user metadata)."""
    return {"Metadata": {SHA256_KEY: sha256}} if _s3(fs) else {}


def _md5_of(found: dict) -> str | None:
    """The MD5 an S3 ETag states: a single-part upload's; a multipart one's ("…-N") is none."""
    etag = str(found.get("ETag") or found.get("etag") or "").strip('"').lower()
    if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag):
        return etag
    return None


def _md5(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()
