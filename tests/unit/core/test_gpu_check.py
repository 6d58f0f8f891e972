"""make gpu-check refuses where no GPU is visible (this host; and a GPU host whose
CUDA_VISIBLE_DEVICES hides them all: the stand-in nvidia-smi, tests/gpu_hosts)."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def _gpu_check(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.core.gpu_check"], cwd=REPO, env=env,
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


def _simulated(tmp_path, **env) -> subprocess.CompletedProcess:
    """`make gpu-check` on the 1 × H100 stand-in, its steps answered by simulated_steps.py."""
    full = {**os.environ, "PATH": f"{REPO / 'tests' / 'gpu_hosts'}{os.pathsep}{os.environ['PATH']}",
            "STANDIN_GPUS": "h100x1",
            "GPU_CHECK_COMMAND": f"{sys.executable} {REPO / 'tests/gpu_hosts/simulated_steps.py'}",
            **env}  # fmt: skip
    full.pop("CUDA_VISIBLE_DEVICES", None)
    out = tmp_path / "table.json"
    cmd = ["make", "-s", "gpu-check", f"ARGS=--json {out} --runs {tmp_path / 'runs'}"]
    done = subprocess.run(cmd, cwd=REPO, env=full, capture_output=True, text=True, timeout=300)
    done.table = json.loads(out.read_text()) if out.is_file() else None
    # make exits 2 when a recipe fails, and names the recipe's own exit code
    done.check_exit = 0 if done.returncode == 0 else int(done.stderr.rsplit("Error ", 1)[-1])
    return done


def test_a_healthy_gpu_host_holds_every_row_and_exits_0(tmp_path):
    done = _simulated(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["step"]: r for r in done.table["steps"]}
    assert all(r["holds"] is not False for r in rows.values()) and done.table["holds"] is True
    assert all(r["proves"] for r in rows.values())  # every row says what it proves
    real = rows["eval hf fp8, 8B shapes"]  # random weights: the gate verdict is expected
    assert real["status"] == "gate_failed" and real["holds"] is True
    assert rows["build 8B shapes (1 layer)"]["holds"] is True
    assert done.table["gpus"] == ["NVIDIA H100 80GB HBM3, 81559 MiB"]
    assert "rows hold, " in done.stdout and " 0 fail" in done.stdout


def test_a_failing_step_is_its_row_and_exit_1(tmp_path):
    done = _simulated(tmp_path, SIMULATE_FAIL="gptq")
    assert done.check_exit == 1
    rows = {r["step"]: r for r in done.table["steps"]}
    assert rows["quantize gptq (oneshot)"]["holds"] is False
    assert rows["quantize gptq (oneshot)"]["detail"] == "error: quantize failed (simulated)"
    assert rows["quantize fp8 (model-free)"]["holds"] is True  # the others still ran
    assert "FAIL quantize gptq (oneshot)" in done.stdout


def test_a_real_shape_build_failure_is_a_row_not_a_lost_table(tmp_path):
    done = _simulated(tmp_path, SIMULATE_FAIL="build")
    assert done.check_exit == 1
    rows = {r["step"]: r for r in done.table["steps"]}
    assert rows["build 8B shapes (1 layer)"]["holds"] is False
    assert "CUDA out of memory" in rows["build 8B shapes (1 layer)"]["detail"]
    assert rows["eval hf fp8, 8B shapes"]["status"] == "not run"
    assert rows["eval hf gptq"]["holds"] is True


def test_a_random_weight_models_drift_must_still_be_finite(tmp_path):
    done = _simulated(tmp_path, SIMULATE_NAN="1")
    assert done.check_exit == 1
    real = next(r for r in done.table["steps"] if r["step"] == "eval hf fp8, 8B shapes")
    assert real["holds"] is False and real["detail"] == "drift not finite: kl_mean"
