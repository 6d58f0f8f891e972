"""Run folders in object storage: RUNS_DIR=s3://bucket/prefix (any fsspec URL; S3 through
s3fs, credentials and endpoint as boto reads them: AWS_* variables, ~/.aws).

Stages work in a local mirror of the run folder (under the cache: mirror_root) and commit by
uploading — every new file first, the manifest last — so an upload killed halfway leaves the
stored manifest as it was: never a `done` whose files are missing. Whoever reads a run folder
(a stage, publish, advise) fetches it first: its files, then its manifest. Committed files are
never rewritten in place (results live in folders named by their inputs' fingerprint), so a
file whose size matches is taken as the same file; hidden names (staging folders, locks,
temporary files) never travel. Nothing is deleted remotely: pruning is local.
"""

import functools
import os

from pipeline.core.paths import mirror_root, runs_url

__all__ = ["pull", "push", "runs_url"]

MANIFEST = "manifest.json"


def pull(rel: str) -> None:
    """Fetch `rel` (a folder under the runs root) into the mirror: what is new or changed,
    manifests last. No-op without object storage, or where nothing is stored yet."""
    if (remote := runs_url()) is None:
        return
    fs, root = _fs(remote)
    base = f"{root}/{rel}".rstrip("/")
    fs.invalidate_cache(base)  # s3fs keeps listings: another machine may have written since
    if not fs.exists(base):
        return
    local = mirror_root(remote) / rel
    found = fs.find(base, detail=True)
    for key in sorted(found, key=lambda k: k.endswith("/" + MANIFEST)):  # manifests last
        inner = key[len(base) :].lstrip("/")
        if _hidden(inner):
            continue
        target = local / inner
        if target.is_file() and target.stat().st_size == found[key]["size"]:
            if not inner.endswith(MANIFEST):  # a manifest changes in place: always fetched
                continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.fetching")
        fs.get_file(key, str(partial))
        os.replace(partial, target)


def push(rel: str) -> None:
    """Upload `rel` from the mirror: new or changed files first, its manifest last."""
    if (remote := runs_url()) is None:
        return
    local = mirror_root(remote) / rel
    if not local.is_dir():
        return
    fs, root = _fs(remote)
    base = f"{root}/{rel}".rstrip("/")
    fs.invalidate_cache(base)
    stored = fs.find(base, detail=True) if fs.exists(base) else {}
    manifest = None
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        inner = path.relative_to(local).as_posix()
        if _hidden(inner):
            continue
        if inner == MANIFEST:
            manifest = path
            continue
        key = f"{base}/{inner}"
        if key in stored and stored[key]["size"] == path.stat().st_size:
            continue
        fs.put_file(str(path), key)
    if manifest is not None:  # last: the commit
        fs.put_file(str(manifest), f"{base}/{MANIFEST}")


def _hidden(inner: str) -> bool:
    return any(part.startswith(".") for part in inner.split("/"))


@functools.cache
def _fs(remote: str):
    import fsspec

    return fsspec.core.url_to_fs(remote)
