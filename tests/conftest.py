"""What every test shares: the repository, an offline environment, the `gpu` marker and `cli`,
which runs the pipeline as a user would. The heavy fixtures (tiny model, quantized and served
artifacts) live in tests/e2e/conftest.py; tests/unit needs none of them. How `make test` spreads
the tests over two workers: tests/parallel.py."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.parallel"]

REPO = Path(__file__).resolve().parent.parent
SERVE_PYTHON = REPO / ".venv-serve" / "bin" / "python"
os.environ.setdefault("PIPELINE_CACHE", str(REPO / ".cache"))
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing in the tests may reach a hub


def has_gpu() -> bool:
    return (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def cli(*args: str, runs: Path, env: dict | None = None, timeout: int = 900):
    """Run `python -m pipeline …` as a user would, with RUNS_DIR pointed at `runs`."""
    full_env = {**os.environ, "RUNS_DIR": str(runs), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
