"""Which CUDA build of torch and vLLM `make setup` installs on a GPU host, from the GPUs' driver
(nvidia-smi) or from CUDA=<version>: the driver runs any CUDA of a major release from its
minimum branch on (devices.MIN_DRIVER: 13.x from R580, 12.x from R525), so R580+ gets PyPI's
builds (CUDA 13) and R525-R579 the CUDA 12.9 builds: torch from PyTorch's cu129 index, vLLM's
release wheel of the same CUDA (vLLM's GPU installation guide names 12.8, 12.9 and 13.0
builds, the release assets `vllm-<version>+cu<NNN>-cp38-abi3-manylinux_2_28_<arch>.whl`).

    python3 -m pipeline.engines.vllm.cuda_builds torch|vllm|check [CUDA]

prints the pip arguments for torch or vLLM (one line), or, for `check`, nothing (exit 0) or the
reason no build fits in one line (exit 2). Standard library only: it runs before any env exists.
"""

import sys
from dataclasses import dataclass

from pipeline.config.engine_name import RELEASE
from pipeline.core import devices

TORCH = "2.13.0"
VLLM = RELEASE  # config/engine_name.py: the one pin
PYTORCH_INDEX = "https://download.pytorch.org/whl/cu{tag}"
VLLM_RELEASE = ("https://github.com/vllm-project/vllm/releases/download/v{vllm}/"
                "vllm-{vllm}+cu{tag}-cp38-abi3-manylinux_2_28_x86_64.whl")  # fmt: skip
DEFAULT = "13.0"  # what PyPI's torch and vLLM wheels are built for (vLLM's VLLM_MAIN_CUDA_VERSION)
BUILDS = ("13.0", "12.9", "12.8")  # newest first: the newest the driver runs is taken


@dataclass(frozen=True)
class Build:
    cuda: str

    @property
    def tag(self) -> str:
        return self.cuda.replace(".", "")

    def torch(self) -> str:
        if self.cuda == DEFAULT:
            return f"torch=={TORCH}"
        # PyPI's 2.13.0 and the index's 2.13.0+cu129 both match: pip takes the local build
        return f"torch=={TORCH} --extra-index-url {PYTORCH_INDEX.format(tag=self.tag)}"

    def vllm(self) -> str:
        if self.cuda == DEFAULT:
            return f"vllm=={VLLM}"
        wheel = VLLM_RELEASE.format(vllm=VLLM, tag=self.tag)
        return f"{wheel} --extra-index-url {PYTORCH_INDEX.format(tag=self.tag)}"


class NoBuild(Exception):
    """No build of torch and vLLM runs on this driver, or CUDA= names none: the one line says
    which and the command that fixes it."""


def chosen(asked: str | None, driver: str | None) -> Build:
    """The build CUDA=`asked` names, else the newest the driver runs (PyPI's without a driver
    reading: nvidia-smi absent or silent)."""
    if asked:
        if asked not in BUILDS:
            raise NoBuild(f"CUDA={asked}: no torch {TORCH} and vLLM {VLLM} build for it; "
                          f"give one of {', '.join(BUILDS)}")  # fmt: skip
        refused = devices.cuda_refused(driver, asked) if driver else None
        if refused:
            raise NoBuild(f"CUDA={asked} needs an NVIDIA driver R{refused} or newer; the GPUs' "
                          f"driver is {driver}: update the driver, or leave CUDA unset for the "
                          "build this driver runs")  # fmt: skip
        return Build(asked)
    if not driver:
        return Build(DEFAULT)
    for cuda in BUILDS:
        if devices.cuda_refused(driver, cuda) is None:
            return Build(cuda)
    oldest = devices.MIN_DRIVER[int(BUILDS[-1].split(".")[0])]
    raise NoBuild(f"the GPUs' driver {driver} is older than any torch {TORCH} build runs on "
                  f"(CUDA {BUILDS[-1]} needs R{oldest}+): update the NVIDIA driver to "
                  f"R{oldest} or newer (R580+ for CUDA 13), then run make setup")  # fmt: skip


def driver() -> str | None:
    """The first GPU's driver version as nvidia-smi reports it (None: no GPU listed)."""
    gpus = devices.listed()
    return gpus[0].driver if gpus else None


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("torch", "vllm", "check"):
        print("usage: python3 -m pipeline.engines.vllm.cuda_builds torch|vllm|check [CUDA]",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        build = chosen(argv[1] if len(argv) > 1 and argv[1] else None, driver())
    except NoBuild as e:
        if argv[0] == "check":
            print(f"error: {e}", file=sys.stderr)
            return 2
        print("no-cuda-build")  # `check` runs first in make setup and stops it
        return 0
    if argv[0] != "check":
        print(build.torch() if argv[0] == "torch" else build.vllm())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
