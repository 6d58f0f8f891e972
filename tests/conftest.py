"""Shared fixtures. The tiny model is built once per checkout (cached in .cache/), and each
recipe is quantized once per test session into a session-wide RUNS_DIR."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from pipeline.tiny.build import ensure

    return ensure()


@pytest.fixture(scope="session")
def session_runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def quantized(session_runs, tiny_model):
    """quantized(recipe) → the run dir, quantizing on first use (once per session)."""
    done: dict[str, Path] = {}

    def get(recipe: str) -> Path:
        if recipe not in done:
            result = cli("quantize", "--recipe", recipe, runs=session_runs)
            assert result.returncode == 0, result.stderr[-3000:]
            done[recipe] = session_runs / "tiny-llama" / recipe
        return done[recipe]

    return get


# Small but real serving: two concurrency levels, 8 requests each, no torch.compile
SWEEP = ["--concurrency", "1,4", "--num-prompts", "8", "--enforce-eager"]


def needs_serving_env():
    from pipeline.backends import vllm

    if not vllm.available():
        pytest.skip("serving env not built (make setup)")


@pytest.fixture(scope="session")
def evaluated(quantized, session_runs):
    """evaluated(recipe) → (results dict, first CLI result), evaluating once per session.
    All with the hf backend, so that comparisons between recipes compare only the recipes."""
    done = {}

    def get(recipe: str):
        if recipe not in done:
            quantized(recipe)
            result = cli("eval", "--recipe", recipe, "--backend", "hf", runs=session_runs)
            assert result.returncode in (0, 1), result.stderr[-3000:]
            path = session_runs / "tiny-llama" / recipe / "eval" / "results.json"
            done[recipe] = (json.loads(path.read_text()), result)
        return done[recipe]

    return get


@pytest.fixture(scope="session")
def served_fp8(quantized, session_runs):
    needs_serving_env()
    quantized("fp8")
    result = cli("serve", "--recipe", "fp8", *SWEEP, runs=session_runs, timeout=1200)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    path = session_runs / "tiny-llama" / "fp8" / "serve" / "results.json"
    return json.loads(path.read_text()), result
