"""The GPUs this process may use: nvidia-smi's list filtered by CUDA_VISIBLE_DEVICES.

nvidia-smi ignores CUDA_VISIBLE_DEVICES: it lists every GPU of the host. A process sees only the
visible ones, renumbered from 0; Ray sets CUDA_VISIBLE_DEVICES to a task's assigned GPUs, so a
task's plan is sized for what Ray gave it. The variable's rules are CUDA's: indices or UUIDs
(`GPU-…`, a unique prefix is enough), comma-separated; the list stops at the first entry that
names no GPU (so "-1" and "" hide every GPU); a repeated GPU ends it too.
"""

import os
import shutil
import subprocess
from dataclasses import dataclass

from pipeline.core.errors import NotOnThisHost

QUERY = "index,uuid,name,memory.total,driver_version"
MIB = 2**20


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
            "R580 or newer). Update the driver, or pin a torch built for this driver's CUDA"
        )
    return f"{said} (CUDA {cuda}): check CUDA_VISIBLE_DEVICES and the GPUs' state (nvidia-smi)"
