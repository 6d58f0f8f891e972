"""The GPUs this process may use: nvidia-smi's list filtered by CUDA_VISIBLE_DEVICES.

nvidia-smi ignores CUDA_VISIBLE_DEVICES: it lists every GPU of the host. A process sees only the
visible ones, renumbered from 0; Ray sets CUDA_VISIBLE_DEVICES to a task's assigned GPUs, so a
task's plan is sized for what Ray gave it. The variable's rules are CUDA's: indices or UUIDs
(`GPU-…`, a unique prefix is enough), comma-separated; the list stops at the first entry that
names no GPU (so "-1" and "" hide every GPU); a repeated GPU ends it too.
"""

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import NotOnThisHost

QUERY = "index,uuid,name,memory.total,driver_version"
MIB = 2**20
# The oldest driver branch that runs any CUDA of a major release (minor-version compatibility;
# newer drivers run older CUDA too), from NVIDIA's CUDA Compatibility guide, "Minor Version
# Compatibility", Table 1: CUDA 13.x >= 580, 12.x >= 525, 11.x >= 450
# (docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
MIN_DRIVER = {13: 580, 12: 525, 11: 450}
ENV_FOLDERS = {"the main env": ".venv", "the serving env": ".venv-serve"}  # the Makefile's
CUDA_LINE = re.compile(r"^cuda\b[^=]*=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.MULTILINE)


@dataclass(frozen=True)
class Gpu:
    index: int  # nvidia-smi's (the host's) numbering; the process numbers visible GPUs from 0
    uuid: str
    name: str
    memory_bytes: int
    driver: str

    def line(self) -> str:
        """As `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` prints it."""
        return f"{self.name}, {self.memory_bytes // MIB} MiB"


def listed() -> list[Gpu]:
    """Every GPU nvidia-smi lists (all of the host's); empty without nvidia-smi or a driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [parse(line) for line in out.splitlines() if line.strip()]


def parse(line: str) -> Gpu:
    index, uuid, name, memory, driver = (x.strip() for x in line.split(","))
    return Gpu(int(index), uuid, name, int(float(memory)) * MIB, driver)


def visible(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[Gpu]:
    """The GPUs a process with this CUDA_VISIBLE_DEVICES sees, in its order (None: all)."""
    if cuda_visible_devices is None:
        return list(gpus)
    seen: list[Gpu] = []
    for entry in cuda_visible_devices.split(","):
        match = _named(gpus, entry.strip())
        if match is None or match in seen:
            break  # CUDA stops at the first entry that names no (new) GPU
        seen.append(match)
    return seen


def _named(gpus: list[Gpu], entry: str) -> Gpu | None:
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    if entry.startswith("GPU-"):
        found = [g for g in gpus if g.uuid.startswith(entry)]
        return found[0] if len(found) == 1 else None
    return None  # MIG-… instances and anything else: not a whole GPU this plan can size


def seen() -> list[Gpu]:
    """The GPUs this process may use."""
    return visible(listed(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def check_torch() -> None:
    """Where GPUs are visible, torch must see as many, else exit 4 before any work: a CPU build
    of torch, or a driver older than torch's CUDA build, would otherwise run quantize silently
    on the CPU while eval and serve size themselves for GPUs. Asked through NVML, so that a
    process that forks afterwards (the test zygote, vLLM's workers) is not left with CUDA
    initialised."""
    gpus = seen()
    if not gpus:
        return
    if why := driver_refusal(gpus, main_torch_version_file(), "the main env"):
        raise NotOnThisHost(why)  # said before torch's import, which would only see 0 GPUs
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == len(gpus):
        return
    raise NotOnThisHost(mismatch(len(gpus), gpus[0].driver, torch.__version__, torch.version.cuda,
                                 count))  # fmt: skip


def mismatch(visible: int, driver: str, torch_version: str, cuda: str | None, count: int) -> str:
    said = (
        f"nvidia-smi shows {visible} GPU(s) this process may use (driver {driver}) but torch "
        f"{torch_version} sees {count}"
    )
    if cuda is None:
        return (
            f"{said}: it is a CPU build. Rebuild the envs on this host (rm -rf .venv .venv-serve "
            "&& make setup): pip then takes the CUDA build"
        )
    if count == 0:
        return (
            f"{said} (built for CUDA {cuda}): the driver is older than that CUDA needs (CUDA 13: "
            "R580 or newer). Update the driver, or rebuild the envs (rm -rf .venv .venv-serve "
            "&& make setup: it installs the build the driver runs)"
        )
    return f"{said} (CUDA {cuda}): check CUDA_VISIBLE_DEVICES and the GPUs' state (nvidia-smi)"


def torch_cuda(version_file: Path | None) -> str | None:
    """The CUDA version a torch build was made for, from the text of its torch/version.py
    (`cuda: Optional[str] = '13.0'`; None for a CPU build or no file): importing torch takes
    seconds, and in the serving env it is another interpreter's."""
    if version_file is None or not version_file.is_file():
        return None
    found = CUDA_LINE.search(version_file.read_text(errors="replace"))
    return (found.group(1) or found.group(2) or None) if found else None


def main_torch_version_file() -> Path | None:
    """torch/version.py of this interpreter's torch, located without importing it."""
    spec = importlib.util.find_spec("torch")  # a top-level name: found, not imported
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).with_name("version.py")


def cuda_refused(driver: str, cuda: str | None) -> int | None:
    """The driver branch a CUDA build needs when this driver is older (None: it runs, or
    either version is one this table does not know)."""
    major = _major(cuda) if cuda else None
    needed = MIN_DRIVER.get(major) if major is not None else None
    have = _major(driver)
    if needed is None or have is None or have >= needed:
        return None
    return needed


def driver_refusal(gpus: list[Gpu], version_file: Path | None, env: str,
                   engine: str = "torch") -> str | None:  # fmt: skip
    """One line naming the driver, the CUDA build and the fix when the visible GPUs' driver is
    older than the CUDA `env`'s torch was built for (None: no GPU, a CPU build, or it runs)."""
    if not gpus:
        return None
    driver, cuda = gpus[0].driver, torch_cuda(version_file)
    needed = cuda_refused(driver, cuda)
    if needed is None:
        return None
    runs = max((m for m, d in MIN_DRIVER.items() if d <= (_major(driver) or 0)), default=None)
    theirs = f"CUDA {runs}.x, the driver's" if runs else "the driver's CUDA"
    return (
        f"{env}: its torch is built for CUDA {cuda}, which needs an NVIDIA driver R{needed} or "
        f"newer; the GPUs' driver is {driver}: update the driver to R{needed}+, or rebuild "
        f"{env} with {engine} for {theirs} (rm -rf {ENV_FOLDERS.get(env, '.venv .venv-serve')} "
        "&& make setup: it installs the build the driver runs)"
    )


def _major(version: str) -> int | None:
    head = version.strip().split(".")[0]
    return int(head) if head.isdigit() else None
