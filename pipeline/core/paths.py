"""Where things are: the checkout's own folders, and the run and cache roots (overridable)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO / "recipes"
TASKS_DIR = REPO / "evals" / "tasks"
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
    """RUNS_DIR when it names object storage (scheme://…), else None."""
    found = os.environ.get("RUNS_DIR") or ""
    return found.rstrip("/") if "://" in found else None


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
