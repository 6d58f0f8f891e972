"""make gpu-check refuses where no GPU is visible (this host; and a GPU host whose
CUDA_VISIBLE_DEVICES hides them all: the stand-in nvidia-smi, tests/gpu_hosts)."""

import os
import subprocess
import sys

from tests.conftest import REPO


def _gpu_check(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.gpu_check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_no_visible_gpu_is_exit_4_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "gpu_hosts" not in p)
    result = _gpu_check(env)
    assert result.returncode == 4, result.stderr
    assert result.stderr.strip() == (
        "error: gpu-check: no GPU visible to this process: nothing to prove on a CPU; run it on "
        "a GPU host"
    )
    hidden = {**env, "PATH": f"{REPO / 'tests' / 'gpu_hosts'}{os.pathsep}{env['PATH']}",
              "STANDIN_GPUS": "h100x8", "CUDA_VISIBLE_DEVICES": ""}  # fmt: skip
    result = _gpu_check(hidden)
    assert result.returncode == 4 and "(CUDA_VISIBLE_DEVICES='')" in result.stderr
