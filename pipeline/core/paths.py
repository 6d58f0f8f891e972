"""Where things are: the checkout's own folders, the cache root, and RUNS_DIR's form (the run
root itself is a value the entry point makes: core/runs.py)."""

import functools
import os
import re
from pathlib import Path

from pipeline.core import secrets
from pipeline.core.errors import NotOnThisHost, UserError

REPO = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO / "recipes"
TASKS_DIR = REPO / "evals" / "tasks"
PROMPTS_FILE = REPO / "evals" / "prompts" / "generation.jsonl"
NIGHTLY_MATRIX = REPO / "evals" / "nightly.yaml"


def runs_url() -> str | None:
    """RUNS_DIR when it names object storage (scheme://…), else None. Checked strictly, once,
    by the command line before any command runs (exit 2, one line naming RUNS_DIR): whitespace
    around it or a control character in it, a URL that lost its `:` or a slash (`s3//b/x`,
    `s3:/b/x`), a scheme that cannot hold run folders (`http://`, `file://`) or is spelled in
    capitals, no bucket (`s3:///x`), an S3 bucket name S3 refuses, an empty, `.` or `..` folder
    in the prefix, a query, a fragment or credentials in the URL; a store whose package this
    host lacks, exit 4."""
    return _checked(os.environ.get("RUNS_DIR") or "")


# Object stores run folders can live in besides a folder, written through s3fs. Not http(s)://
# (fsspec reads it, never writes), memory:// (gone with the process), file:// (a folder is given
# as its path), nor fsspec's wrappers (zip://). GCS and Azure are refused: a commit's manifest
# is written only over the version it read (S3's If-Match, store_transport.write_pointer), and
# gcsfs's and adlfs's preconditions are neither wired nor tested here: two machines committing
# one folder there would overwrite each other's merge, and the GC could read an age of 0.
STORES = ("s3", "s3a")
UNSUPPORTED_STORES = ("gs", "gcs", "az", "abfs", "abfss")
# S3's rule for every bucket made since 2018 (botocore's own check, handlers.VALID_BUCKET,
# still lets through the older names: capitals, `_`, 255 characters)
_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_S3_RULE = "3–63 lowercase letters, digits, dots and hyphens, a letter or digit at each end"
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")


@functools.cache
def _checked(found: str) -> str | None:
    shown = secrets.url(found)
    if found != found.strip() or not found.isprintable():
        raise UserError(
            f"RUNS_DIR={shown!r}: whitespace around it or a control character in it (a copied "
            "line break?): give the folder or s3://bucket/prefix alone"
        )
    scheme, sep, rest = found.partition("://")
    if not sep:
        near = re.match(r"([A-Za-z][A-Za-z0-9+.-]+)(:|//)", found)  # s3:/b/x, s3//b/x
        if near and ((meant := near[1].lower()) in STORES or _known(meant)):
            url = f"{meant if meant in STORES else 's3'}://bucket/prefix"
            raise UserError(f"RUNS_DIR={shown}: not a URL ({url}) nor a folder")
        return None  # a folder
    if scheme in UNSUPPORTED_STORES:
        raise UserError(
            f"RUNS_DIR={shown}: {scheme}:// is not supported for run folders (no conditional "
            "writes wired for it: concurrent commits would overwrite each other); use s3:// "
            "(S3 or an S3-compatible store) or a shared folder"
        )
    if scheme not in STORES:
        if scheme.lower() in STORES:
            raise UserError(
                f"RUNS_DIR={shown}: the scheme is spelled {scheme.lower()}:// (lowercase)"
            )
        stores = ", ".join(f"{s}://" for s in STORES)
        raise UserError(f"RUNS_DIR={shown}: {scheme}:// cannot hold run folders: give a folder "
                        f"or an object store's bucket/prefix ({stores})")  # fmt: skip
    if why := _not_a_root(scheme, rest):
        raise UserError(f"RUNS_DIR={shown}: {why}")
    _importable(scheme, shown)
    return found.removesuffix("/")


def _not_a_root(scheme: str, rest: str) -> str | None:
    """What makes `scheme://rest` no bucket and prefix (None: it is one)."""
    if "?" in rest or "#" in rest:
        return f"a query or fragment (?…, #…) names no folder ({scheme}://bucket/prefix)"
    bucket, sep, prefix = rest.removesuffix("/").partition("/")
    if "@" in bucket:
        return "credentials belong in the environment (AWS_*, ~/.aws), not in RUNS_DIR"
    if not bucket:
        return f"no bucket ({scheme}://bucket/prefix)"
    if scheme in ("s3", "s3a") and not (
        _S3_BUCKET.fullmatch(bucket) and ".." not in bucket and not _IPV4.fullmatch(bucket)
    ):
        return f"{bucket} is no S3 bucket name ({_S3_RULE}, no '..', not an IP address)"
    if sep and any(part in ("", ".", "..") for part in prefix.split("/")):
        return f"an empty, . or .. folder in the prefix {prefix!r}"
    return None


def _known(scheme: str) -> bool:
    from fsspec.registry import known_implementations, registry

    return scheme in known_implementations or scheme in registry


def _importable(scheme: str, shown: str) -> None:
    import fsspec
    from fsspec.registry import known_implementations

    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError:
        package = known_implementations[scheme]["class"].split(".")[0]
        raise NotOnThisHost(
            f"RUNS_DIR={shown}: {scheme}:// needs the {package} package, which this host lacks "
            f"(.venv/bin/pip install {package})"
        ) from None


def mirror_root(remote: str) -> Path:
    """Where run folders stored at `remote` are worked on: under the cache (Runs.local)."""
    scheme, _, rest = remote.partition("://")
    return cache_root() / "runs-mirror" / scheme / rest


def generated_recipes() -> Path:
    """Where `make search` writes its recipes ($GENERATED_RECIPES; default recipes/generated)."""
    return Path(os.environ.get("GENERATED_RECIPES") or RECIPES_DIR / "generated").resolve()


def cache_root() -> Path:
    return Path(os.environ.get("PIPELINE_CACHE") or Path.cwd() / ".cache").resolve()


def hub_cache() -> Path:
    """Where huggingface_hub downloads models: $HF_HUB_CACHE, $HF_HOME/hub, or its default."""
    if found := os.environ.get("HF_HUB_CACHE"):
        return Path(found).expanduser().resolve()
    home = os.environ.get("HF_HOME") or Path("~/.cache/huggingface").expanduser()
    return (Path(home).expanduser() / "hub").resolve()
