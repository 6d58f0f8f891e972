"""A serving env whose CUDA build the GPUs' driver cannot run is refused before any stage, not
found when vLLM crashes after quantize and eval ran; and a rebuilt serving env is probed anew.

The GPUs are tests/gpu_hosts/nvidia-smi's stand-in (this host has none). Its machine file
h100x1-r550.csv is h100x1.csv with an R550 driver (550.163.01, a published R550 release); like
the others it is written in nvidia-smi's format from published figures, not captured on a
machine of this project. The serving env is a folder shaped like one: the stamp `make setup`
writes and a torch/version.py; the dry run reads those and never starts its python."""

import os
import subprocess
import sys
from pathlib import Path

from pipeline.engines.vllm import serving_env
from tests.conftest import REPO
from tests.unit.core.test_cuda_driver import version_file
from tests.unit.core.test_devices import STANDIN, standin

REFUSAL = (
    "error: the serving env: its torch is built for CUDA 13.0, which needs an NVIDIA driver R580 "
    "or newer; the GPUs' driver is 550.163.01: update the driver to R580+, or rebuild the "
    "serving env with torch and vLLM for CUDA 12.x, the driver's (rm -rf .venv-serve && make "
    "setup: it installs the build the driver runs)"
)


def fake_serving_env(root: Path, cuda: str | None = "13.0", build: str = "cuda") -> Path:
    """A venv-shaped folder: its python path (not a real one), stamp and torch/version.py."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").touch()
    (root / f".installed-{build}").write_text("abc123  requirements/serve-cuda.txt\n")
    version_file(root / "lib" / "python3.11" / "site-packages", cuda)
    return root / "bin" / "python"


def test_a_cuda_build_the_driver_cannot_run_is_the_serving_envs_wrong_build(tmp_path, monkeypatch):
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", fake_serving_env(tmp_path))
    standin(monkeypatch, "h100x1-r550")
    assert "error: " + serving_env.wrong_build() == REFUSAL
    assert serving_env.driver_refusals() == [REFUSAL.removeprefix("error: ")]  # main env: CPU
    standin(monkeypatch, "h100x1")  # R580: it runs
    assert serving_env.wrong_build() is None and serving_env.driver_refusals() == []


def test_run_dry_run_exits_4_before_any_stage_naming_driver_build_and_fix(tmp_path):
    """The acceptance of issue 42: `make run ARGS=--dry-run` on a stand-in GPU whose driver
    cannot run the serving env's CUDA build (the main env's torch here is a CPU build)."""
    env = {
        **os.environ,
        "PATH": f"{STANDIN}{os.pathsep}{os.environ['PATH']}",
        "STANDIN_GPUS": "h100x1-r550",
        "SERVE_PYTHON": str(fake_serving_env(tmp_path / "serve")),
        "RUNS_DIR": str(tmp_path / "runs"),
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    argv = ["run", "--model", "tiny-llama", "--recipe", "fp8", "--dry-run"]
    done = subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 4, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [REFUSAL]
    assert not (tmp_path / "runs").exists()  # nothing was made
    env["STANDIN_GPUS"] = "h100x1"  # the same env on an R580 driver: planned, exit 0
    done = subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_rebuilt_serving_env_is_probed_anew(tmp_path, monkeypatch):
    """The capability probe's cache is keyed by the env's vLLM version and build stamp, not
    only its path: the same folder rebuilt (another wheel, another stamp) re-probes."""
    root = tmp_path / "serve"
    python = fake_serving_env(root, build="cpu")
    calls = tmp_path / "calls"
    python.write_text(f"#!/bin/sh\necho probed >> {calls}\necho '{{\"w4a16\": true}}'\n")
    python.chmod(0o755)
    site = root / "lib" / "python3.11" / "site-packages"
    meta = site / "vllm-0.32.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Name: vllm\nVersion: 0.32.0\n")
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", python)
    monkeypatch.setattr(serving_env, "cache_root", lambda: tmp_path / "cache")

    def probes() -> int:
        assert serving_env.capabilities() == {"w4a16": True}
        return len(calls.read_text().splitlines())

    assert probes() == 1 and probes() == 1  # cached
    (root / ".installed-cpu").write_text("def456  requirements/serve-cpu.txt\n")
    assert probes() == 2  # the env rebuilt: a new stamp
    (meta / "METADATA").write_text("Name: vllm\nVersion: 0.33.0\n")
    assert probes() == 3 and probes() == 3  # another vLLM
