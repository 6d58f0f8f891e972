"""The transport of run folders in object storage: the store RUNS_DIR names (an fsspec
filesystem, S3 through s3fs), each request under a deadline, failures as one line naming
RUNS_DIR, and the one conditional write a commit needs (S3's If-Match / If-None-Match on a
folder's manifest). What travels and when is objectstore's (the sync)."""

import contextlib
import copy
import functools
import time
from dataclasses import dataclass
from typing import Any

from pipeline.core import secrets
from pipeline.core.errors import PipelineError, UserError, first_line

MANIFEST = "manifest.json"
OBJECTS = ".objects/sha256"
# botocore's defaults kept a stalled endpoint busy ~418 s; with these one request gives up
# after at most attempts × (connect + read) s plus backoff: 214 s (deadline_s). In botocore's
# client config `max_attempts` counts retries (3 would be 4 requests): the total is explicit.
S3_TRANSPORT = {"connect_timeout": 10, "read_timeout": 60,
                "retries": {"total_max_attempts": 3, "mode": "standard"}}  # fmt: skip


class StoreError(PipelineError):
    """The store failed or did not answer within its deadline: one line naming RUNS_DIR."""


def deadline_s(transport: dict | None = None) -> float:
    """The longest one S3 request may take under `transport` (S3_TRANSPORT)."""
    t: dict[str, Any] = transport or S3_TRANSPORT  # botocore's Config keyword arguments
    attempts = t["retries"]["total_max_attempts"]
    return attempts * (t["connect_timeout"] + t["read_timeout"]) + 2 ** (attempts - 1)


@dataclass(frozen=True)
class Store:
    remote: str
    fs: Any
    root: str
    s3: bool  # conditional writes (If-Match): a commit is a compare-and-swap

    def key(self, rel: str) -> str:
        return f"{self.root}/{rel}".rstrip("/")

    def pointer(self, rel: str) -> str:
        return f"{self.key(rel)}/{MANIFEST}"

    def object(self, sha: str) -> str:
        return f"{self.root}/{OBJECTS}/{sha[:2]}/{sha}"

    def shown(self) -> str:
        return f"RUNS_DIR={secrets.url(self.remote)}"


@functools.cache
def open_store(remote: str) -> Store:
    """The filesystem of RUNS_DIR, its bucket checked once per process (exit 2 where it is
    missing or refuses these credentials)."""
    import fsspec

    s3 = remote.startswith(("s3://", "s3a://"))
    options = {"config_kwargs": copy.deepcopy(S3_TRANSPORT)} if s3 else {}  # botocore edits it
    fs, root = fsspec.core.url_to_fs(remote, skip_instance_cache=True, **options)
    if options:
        fs.retries = 1  # s3fs's own loop around botocore's: its retries bound the deadline
    store = Store(remote, fs, root.rstrip("/"), s3)
    if options:
        with failing(store, "reaching the bucket"):
            _check_bucket(store)
    return store


def _check_bucket(store: Store) -> None:
    bucket = store.root.split("/", 1)[0]
    try:
        store.fs.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        raise UserError(f"{store.shown()}: bucket {bucket} does not exist at this endpoint "
                        "(AWS_ENDPOINT_URL, or AWS's where unset)") from None  # fmt: skip
    except PermissionError as e:
        raise UserError(f"{store.shown()}: bucket {bucket} refuses these credentials "
                        f"({why(e)}): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                        "AWS_PROFILE or ~/.aws") from None  # fmt: skip
    except Exception as e:
        if type(e).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            raise UserError(f"{store.shown()}: no credentials for bucket {bucket} "
                            "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
                            "~/.aws)") from None  # fmt: skip
        raise


@contextlib.contextmanager
def failing(store: Store, what: str):
    """A transport's failure as one line naming RUNS_DIR (masked) and what failed."""
    started = time.monotonic()
    try:
        yield
    except PipelineError:
        raise
    except _transport_errors() as e:
        took = time.monotonic() - started
        raise StoreError(secrets.text(
            f"{store.shown()}: {what} failed after {took:.0f} s: {type(e).__name__}: {why(e)}"
        )) from e  # fmt: skip


@functools.cache
def _transport_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, TimeoutError)
    with contextlib.suppress(ImportError):
        from botocore.exceptions import BotoCoreError, ClientError

        errors += (BotoCoreError, ClientError)
    return errors


def why(e: BaseException) -> str:
    return " ".join(first_line(e).split())[:300]


@dataclass(frozen=True)
class Read:
    raw: bytes
    etag: str | None  # what a conditional write compares with (S3)


def read_pointer(store: Store, rel: str) -> Read | None:
    """The stored manifest of `rel` (None where there is none): what it names is what a pull
    fetches, whatever commits after this read."""
    try:
        if not store.s3:
            return Read(store.fs.cat_file(store.pointer(rel)), None)
        return Read(*_get_with_etag(store, store.pointer(rel)))
    except FileNotFoundError:
        return None


def _get_with_etag(store: Store, key: str) -> tuple[bytes, str | None]:
    """One GET: the body and the ETag of that very version (s3fs's cat drops the ETag)."""
    from fsspec.asyn import sync

    bucket, path, _ = store.fs.split_path(key)

    async def get():
        found = await store.fs._call_s3("get_object", Bucket=bucket, Key=path)
        try:
            return await found["Body"].read(), found.get("ETag")
        finally:
            found["Body"].close()

    return sync(store.fs.loop, get)


class Conflict(Exception):
    """Another commit replaced the stored manifest between this one's read and write."""


def write_pointer(store: Store, rel: str, body: bytes, read: Read | None) -> None:
    """The commit: on S3, only over the version read (If-Match), or where none was
    (If-None-Match); a store without conditional writes takes it plainly."""
    condition = {}
    if store.s3:
        condition = {"IfMatch": read.etag} if read and read.etag else {"IfNoneMatch": "*"}
    try:
        store.fs.pipe_file(store.pointer(rel), body, **condition)
    except OSError as e:
        code = _error_code(e)
        if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            raise Conflict from None
        if code not in ("NotImplemented", "501") or not condition:
            raise
        store.fs.pipe_file(store.pointer(rel), body)


def _error_code(e: BaseException) -> str | None:
    """The S3 error code behind s3fs's translated OSError."""
    if isinstance(e, FileExistsError):  # s3fs's word for a failed If-None-Match
        return "PreconditionFailed"
    response = getattr(e.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code")
