"""gpu-check's negative control for the fork guard (pipeline/core/own_process.py): this process
initialises CUDA the way that poisons fork — a plain `torch.cuda.is_available()`, no NVML check —
then hands GPU work to `own_process.call`. The guard must catch it and run the work here (said on
stderr); without the guard the forked child dies with "Cannot re-initialize CUDA in forked
subprocess". Prints `result 1024` when the work was done.

    python -m pipeline.gpu_host.fork_guard_check      (on a GPU host)
"""

import os

os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # before torch reads it

import torch  # noqa: E402

from pipeline.core import own_process  # noqa: E402


def work() -> int:
    return int(torch.ones(1024, device="cuda").sum().item())


if __name__ == "__main__":
    torch.cuda.is_available()  # initialises the CUDA driver: fork is unsafe from here on
    print("result", own_process.call(work))
