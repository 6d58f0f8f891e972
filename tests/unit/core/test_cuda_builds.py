"""The CUDA build `make setup` installs on a GPU host follows the GPUs' driver
(pipeline/engines/vllm/cuda_builds.py): the stand-in nvidia-smi at R535, R550, R570 and R580
(published driver releases; tests/gpu_hosts), `make -n setup` printing the torch and vLLM it
would take.
Nothing is downloaded: this host reaches neither PyTorch's index nor vLLM's release assets."""

import os
import subprocess

import pytest

from pipeline.engines.vllm import cuda_builds
from pipeline.engines.vllm.cuda_builds import NoBuild, chosen
from tests.conftest import REPO
from tests.unit.core.test_devices import STANDIN

CU129 = "https://download.pytorch.org/whl/cu129"
VLLM_CU129 = (
    "https://github.com/vllm-project/vllm/releases/download/v0.32.0/"
    "vllm-0.32.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl"
)


def test_the_newest_build_the_driver_runs_is_taken_and_cuda_names_one():
    for driver in ("535.247.01", "550.163.01", "570.172.08", "575.57.08"):
        assert chosen(None, driver).cuda == "12.9", driver
    assert chosen(None, "580.95.05").cuda == "13.0"
    assert chosen(None, None).cuda == "13.0"  # no driver read: PyPI's
    assert chosen("12.8", "550.163.01").torch() == (
        "torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cu128"
    )
    assert chosen("13.0", "580.95.05").vllm() == "vllm==0.32.0"


def test_no_build_that_fits_is_one_line_naming_the_fix():
    with pytest.raises(NoBuild, match=r"^CUDA=13.0 needs an NVIDIA driver R580 or newer; the "):
        chosen("13.0", "550.163.01")
    with pytest.raises(NoBuild, match=r"^CUDA=11.8: no torch 2.13.0 and vLLM 0.32.0 build for it"):
        chosen("11.8", "580.95.05")
    with pytest.raises(NoBuild) as old:
        chosen(None, "470.256.02")
    assert str(old.value) == (
        "the GPUs' driver 470.256.02 is older than any torch 2.13.0 build runs on (CUDA 12.8 "
        "needs R525+): update the NVIDIA driver to R525 or newer (R580+ for CUDA 13), then run "
        "make setup"
    )


def _make_n_setup(machine: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{STANDIN}{os.pathsep}{os.environ['PATH']}",
           "STANDIN_GPUS": machine}  # fmt: skip
    env.pop("CUDA_VISIBLE_DEVICES", None)
    argv = ["make", "-n", "setup", f"VENV={tmp_path}/.venv", f"SERVE_VENV={tmp_path}/.venv-serve"]
    return subprocess.run([*argv, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize("machine", ["h100x1-r535", "h100x1-r550", "h100x1-r570"])
def test_make_setup_on_a_cuda_12_driver_takes_cuda_12_builds(machine, tmp_path):
    shown = _make_n_setup(machine, tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    main = f"--python {tmp_path}/.venv/bin/python"
    main_torch = next(x for x in lines if main in x and "torch" in x)
    assert main_torch.endswith(f"torch==2.13.0 --extra-index-url {CU129}")
    serve = [x for x in lines if f"--python {tmp_path}/.venv-serve/bin/python" in x]
    assert any(f"torch==2.13.0 --extra-index-url {CU129} -c requirements/serve-cuda.txt" in x
               for x in serve)  # fmt: skip
    assert any(VLLM_CU129 in x and "-c requirements/serve-cuda.txt" in x for x in serve)
    assert "cuda_builds check" in shown.stdout  # setup stops first where none fits


def test_make_setup_on_r580_takes_pypis_cuda_13_builds_and_cuda_overrides(tmp_path):
    shown = _make_n_setup("h100x1", tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "download.pytorch.org" not in shown.stdout and "releases/download" not in shown.stdout
    locked = "vllm==0.32.0 openai lm_eval -c requirements/serve-cuda.txt"
    assert locked in shown.stdout
    older = _make_n_setup("h100x1", tmp_path, "CUDA=12.8")
    assert "whl/cu128" in older.stdout and "vllm-0.32.0+cu128" in older.stdout


def test_check_refuses_before_anything_is_removed_or_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPUS", "h100x1-r550")
    done = subprocess.run(["python3", "-m", "pipeline.engines.vllm.cuda_builds", "check", "13.0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: CUDA=13.0 needs an NVIDIA driver R580 or newer; the GPUs' driver is 550.163.01: "
        "update the driver, or leave CUDA unset for the build this driver runs"
    ]
    assert cuda_builds.main(["torch"]) == 0  # the build R550 runs: no refusal
