"""A torch's CUDA build against the GPUs' driver, read from files (no torch import): NVIDIA's
minimum driver per CUDA major (minor-version compatibility) decides."""

from pathlib import Path

import pytest

from pipeline.core import devices
from pipeline.core.errors import NotOnThisHost
from tests.unit.core.test_devices import standin


def version_file(folder: Path, cuda: str | None) -> Path:
    """A torch/version.py as torch's wheels write it."""
    path = folder / "torch" / "version.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    said = repr(cuda) if cuda else "None"
    path.write_text(
        "from typing import Optional\n\n"
        "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
        "__version__ = '2.13.0'\ndebug = False\n"
        f"cuda: Optional[str] = {said}\n"
        "hip: Optional[str] = None\n"
    )
    return path


def gpu(driver: str) -> devices.Gpu:
    return devices.Gpu(0, "GPU-0", "NVIDIA H100 80GB HBM3", 80 * 2**30, driver)


@pytest.mark.parametrize(
    ("driver", "cuda", "needed"),
    [
        ("550.163.01", "13.0", 580),  # R550 cannot run the CUDA 13 build
        ("580.95.05", "13.0", None),
        ("590.44.01", "13.0", None),  # a newer branch runs an older CUDA
        ("535.261.03", "12.4", None),
        ("470.256.02", "12.1", 525),
        ("450.80.02", "11.8", None),
        ("550.163.01", None, None),  # a CPU build needs no driver
        ("550.163.01", "14.0", None),  # a CUDA this table does not know: trusted
    ],
)
def test_the_minimum_driver_is_nvidias_per_cuda_major(driver, cuda, needed):
    assert devices.cuda_refused(driver, cuda) == needed


def test_the_cuda_build_is_read_from_torchs_version_file(tmp_path):
    assert devices.torch_cuda(version_file(tmp_path / "a", "13.0")) == "13.0"
    assert devices.torch_cuda(version_file(tmp_path / "b", None)) is None
    assert devices.torch_cuda(tmp_path / "missing" / "version.py") is None
    assert devices.torch_cuda(None) is None
    here = devices.main_torch_version_file()  # this env's torch: the CPU build
    assert here is not None and here.name == "version.py" and devices.torch_cuda(here) is None


def test_the_refusal_names_the_driver_the_build_and_the_fix(tmp_path):
    cuda13 = version_file(tmp_path, "13.0")
    said = devices.driver_refusal([gpu("550.163.01")], cuda13, "the main env")
    assert said == (
        "the main env: its torch is built for CUDA 13.0, which needs an NVIDIA driver R580 or "
        "newer; the GPUs' driver is 550.163.01: update the driver to R580+, or rebuild the main "
        "env with torch for CUDA 12.x, the driver's (rm -rf .venv && make setup: it installs the "
        "build the driver runs)"
    )
    assert devices.driver_refusal([gpu("580.95.05")], cuda13, "the main env") is None
    assert devices.driver_refusal([], cuda13, "the main env") is None  # no GPU: nothing to run


def test_check_torch_refuses_an_old_driver_before_importing_torch(tmp_path, monkeypatch):
    standin(monkeypatch, "h100x1-r550")
    cuda13 = version_file(tmp_path, "13.0")
    monkeypatch.setattr(devices, "main_torch_version_file", lambda: cuda13)
    with pytest.raises(NotOnThisHost, match=r"driver is 550\.163\.01: update the driver to R580"):
        devices.check_torch()
