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


def test_the_wheels_carried_to_a_bare_gpu_machine_are_the_envs_own_pins():
    """requirements/gpu-carry.txt (make gpu-wheels) pins what requirements/main.txt pins."""

    def pins(name: str) -> dict[str, str]:
        lines = (REPO / "requirements" / name).read_text().splitlines()
        pairs = (x.split("==") for x in lines if x.strip() and not x.startswith("#"))
        return {n.lower().replace("_", "-"): v for n, v in pairs}

    carried, main = pins("gpu-carry.txt"), pins("main.txt")
    assert carried and {n: main.get(n) for n in carried} == carried
    assert "llmcompressor" in carried and "torch" not in carried  # the machine's own torch


def test_the_bare_machine_script_refuses_without_its_wheels(tmp_path):
    """pipeline/gpu_check_bare.sh, copied with the package into a checkout with no .carry/."""
    import shutil

    shutil.copytree(
        REPO / "pipeline", tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    result = subprocess.run(["bash", str(tmp_path / "pipeline" / "gpu_check_bare.sh")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: gpu-check-bare: no wheels in .carry/wheels: run make gpu-wheels and carry it"
    )
