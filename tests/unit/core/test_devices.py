"""The GPUs a process may use, against a stand-in nvidia-smi (tests/gpu_hosts/nvidia-smi: this
host has no GPU; it prints nvidia-smi's output format for 1 × H100, 8 × H100 and 8 × H200 from
the GPUs' published figures — see its docstring)."""

import os
import sys
from pathlib import Path

import pytest

from pipeline.core import devices, environment
from pipeline.core.errors import NotOnThisHost
from tests.conftest import REPO, cli

STANDIN = REPO / "tests" / "gpu_hosts"


def standin(monkeypatch, machine: str, visible: str | None = None) -> None:
    monkeypatch.setenv("PATH", f"{STANDIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPUS", machine)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)


def test_nvidia_smi_lists_every_gpu_a_process_sees_only_the_visible(monkeypatch):
    standin(monkeypatch, "h100x8")
    assert len(devices.listed()) == 8 and len(environment.gpus()) == 8
    assert environment.gpus()[0] == "NVIDIA H100 80GB HBM3, 81559 MiB"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [g.index for g in devices.seen()] == [2, 3] and len(environment.gpus()) == 2
    standin(monkeypatch, "h200x8", "7")
    (gpu,) = devices.seen()
    assert gpu.index == 7 and gpu.memory_bytes == 143_771 * 2**20 and gpu.driver == "580.95.05"


def test_cuda_visible_devices_follows_cudas_rules(monkeypatch):
    standin(monkeypatch, "h100x8")
    gpus = devices.listed()
    by = {g.index: g for g in gpus}
    assert devices.visible(gpus, None) == gpus
    assert devices.visible(gpus, "") == [] and devices.visible(gpus, "-1") == []
    assert devices.visible(gpus, "3,1") == [by[3], by[1]]  # in the variable's order
    assert devices.visible(gpus, "0,9,1") == [by[0]]  # stops at the first GPU it cannot find
    assert devices.visible(gpus, "1,1,2") == [by[1]]  # a repeated one ends it too
    uuid = by[5].uuid
    assert devices.visible(gpus, f"{uuid[:12]},0") == [by[5], by[0]]  # a unique UUID prefix
    assert devices.visible(gpus, "GPU-,0") == []  # a prefix of every UUID names none
    assert devices.visible(gpus, "MIG-0") == []


def test_gpus_listed_that_torch_cannot_use_are_exit_4_with_the_fix(monkeypatch):
    """This host's torch is the CPU build: with GPUs listed, that is the mismatch a GPU host
    with the wrong wheel (or a driver older than torch's CUDA) has."""
    import torch

    standin(monkeypatch, "h100x1")
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    with pytest.raises(NotOnThisHost) as refused:
        devices.check_torch()
    said = str(refused.value)
    assert said.startswith("nvidia-smi shows 1 GPU(s) this process may use (driver 580.95.05)")
    assert f"torch {torch.__version__} sees 0" in said and "CPU build" in said
    assert "make setup" in said
    old_driver = devices.mismatch(8, "550.54.15", "2.13.0", "13.0", 0)
    assert "R580" in old_driver and "CUDA 13.0" in old_driver
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    devices.check_torch()  # nothing visible: nothing to check


def test_quantize_with_gpus_torch_cannot_see_exits_4_before_any_work(monkeypatch, tmp_path):
    if devices.torch_cuda(devices.main_torch_version_file()):
        pytest.skip("this env's torch is a CUDA build: it sees the host's own GPUs")
    env = {
        "PATH": f"{STANDIN}{os.pathsep}{os.environ['PATH']}",
        "STANDIN_GPUS": "h100x8",
        "CUDA_VISIBLE_DEVICES": None,  # all eight (a test worker may hide its host's GPUs)
    }
    result = cli("quantize", "--recipe", "w4a16-rtn", runs=tmp_path, env=env)
    assert result.returncode == 4, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # says what else printed, if anything ever does
    (line,) = lines
    assert line.startswith("error: nvidia-smi shows 8 GPU(s)") and "CPU build" in line
    assert not (tmp_path / "tiny-llama").exists()  # nothing was made


def test_the_standin_answers_as_nvidia_smi_does(monkeypatch):
    import subprocess

    standin(monkeypatch, "h100x1")
    said = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    assert said.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv"]
    lines = subprocess.run(query, capture_output=True, text=True).stdout.splitlines()
    assert lines == ["name, memory.total [MiB]", "NVIDIA H100 80GB HBM3, 81559 MiB"]
    assert Path(sys.executable).exists()


def test_gpu_checks_memory_watch_counts_only_the_visible_gpus(monkeypatch):
    """nvidia-smi reports every GPU of the host: another job's use of GPU 5 is no step's."""
    from pipeline.gpu_host import memory_watch as gpu_memory_watch

    standin(monkeypatch, "h100x8", "2,3")
    visible = {g.index for g in devices.seen()}
    out = "".join(f"{i}, {1000 * (i + 1)}\n" for i in range(8))  # as nvidia-smi prints it
    assert gpu_memory_watch.visible_sum(out, visible) == 3000 + 4000
    assert gpu_memory_watch.visible_sum(out, set()) is None  # none visible: nothing to watch
