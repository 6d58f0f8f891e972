"""Where things are: the checkout's own folders, and the run and cache roots (overridable)."""

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
# Scripts run by the serving env's python (vLLM cannot be imported in the main env).
VLLM_SCRIPTS = REPO / "pipeline" / "vllm_scripts"


def runs_root() -> Path:
    """RUNS_DIR (default ./runs); for object storage (s3://…) its local mirror, which the run
    folders sync with (core/objectstore.py)."""
    if remote := runs_url():
        return mirror_root(remote)
    return Path(os.environ.get("RUNS_DIR") or Path.cwd() / "runs").resolve()


def runs_url() -> str | None:
    """RUNS_DIR when it names object storage (scheme://…), else None. A value meant as a URL
    but not one (`s3:/bucket/x`, `S3://…`, no bucket) is refused here, where every reader of
    RUNS_DIR passes before any work (exit 2); a scheme whose package this host lacks, exit 4."""
    return _checked(os.environ.get("RUNS_DIR") or "")


@functools.cache
def _checked(found: str) -> str | None:
    scheme, sep, rest = found.partition("://")
    if not sep:
        if (near := re.match(r"([A-Za-z][A-Za-z0-9+.-]+):", found)) and _known(near[1].lower()):
            raise UserError(
                f"RUNS_DIR={secrets.url(found)}: not a URL ({near[1].lower()}://bucket/prefix)"
            )
        return None  # a folder
    shown = secrets.url(found)
    if not _known(scheme):
        if _known(scheme.lower()):
            raise UserError(
                f"RUNS_DIR={shown}: the scheme is spelled {scheme.lower()}:// (lowercase)"
            )
        raise UserError(f"RUNS_DIR={shown}: {scheme}:// is no storage fsspec knows "
                        "(s3://bucket/prefix, or a folder)")  # fmt: skip
    if not rest.strip("/"):
        raise UserError(f"RUNS_DIR={shown}: no bucket ({scheme}://bucket/prefix)")
    _importable(scheme, shown)
    return found.rstrip("/")


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
    """Where run folders stored at `remote` are worked on: under the cache."""
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
