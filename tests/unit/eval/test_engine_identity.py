"""The eval reference and the original's task scores are keyed by what their figures depend
on: the backend, the device, the dtype it computes in and the engine's build. A float32 CPU
reference is not reused by a bf16 GPU eval (KL and perplexity would measure the dtype). The
GPUs are tests/gpu_hosts/nvidia-smi's stand-in: this host has none."""

import subprocess
import sys

from pipeline.config.recipe import EvalSettings, TaskSpec
from pipeline.engines.vllm import engine_identity
from pipeline.eval import reference_key, tasks
from tests.unit.core.test_devices import standin

MODEL = {"name": "tiny-llama", "content_sha256": "abc"}
WINDOWS = {"sha256": "0123", "shape": [17, 512]}


def _reference_key() -> str:
    return reference_key.key(MODEL, WINDOWS, EvalSettings(), engine_identity.identity("hf"))


def test_an_hf_reference_made_on_a_cpu_is_not_the_one_a_gpu_eval_uses(monkeypatch):
    standin(monkeypatch, "h100x1", "")  # GPUs listed, none visible: a CPU process
    on_cpu = engine_identity.identity("hf")
    assert on_cpu["device"] == "cpu" and on_cpu["dtype"] == "float32"
    assert on_cpu["build"]["torch"].startswith("2.") and on_cpu["build"]["cuda"] is None
    cpu_key = _reference_key()
    assert _reference_key() == cpu_key  # equal inputs, equal keys
    standin(monkeypatch, "h100x1")
    on_gpu = engine_identity.identity("hf")
    assert on_gpu["device"] == "1 × NVIDIA H100 80GB HBM3" and on_gpu["dtype"] == "checkpoint"
    gpu_key = _reference_key()
    assert gpu_key != cpu_key and _reference_key() == gpu_key
    standin(monkeypatch, "h100x8", "0,1")
    assert engine_identity.identity("hf")["device"] == "2 × NVIDIA H100 80GB HBM3"
    assert _reference_key() not in (cpu_key, gpu_key)  # another device count


def test_the_original_task_scores_are_keyed_by_the_engine_too(monkeypatch):
    spec = [TaskSpec(task="t")]
    standin(monkeypatch, "h100x1", "")
    on_cpu = tasks.key(MODEL, spec, engine_identity.identity("hf"))
    standin(monkeypatch, "h100x1")
    assert tasks.key(MODEL, spec, engine_identity.identity("hf")) != on_cpu


def test_the_vllm_identity_is_its_bf16_engine_and_the_serving_envs_build(monkeypatch, tmp_path):
    from pipeline.engines.vllm import serving_env
    from tests.unit.serve.test_cuda_driver_refusal import fake_serving_env

    python = fake_serving_env(tmp_path, cuda="12.8")
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", python)
    standin(monkeypatch, "h200x8")
    found = engine_identity.identity("vllm")
    assert found["device"] == "8 × NVIDIA H200" and found["dtype"] == "bfloat16"
    assert found["build"]["cuda"] == "12.8" and found["build"]["stamp"].startswith(
        ".installed-cuda:abc123"
    )
    (tmp_path / ".installed-cuda").write_text("rebuilt\n")
    assert engine_identity.identity("vllm") != found


def test_the_identity_imports_no_torch():
    """A cached eval must stay under a second: the keys are made before any torch import."""
    code = (
        "import sys, time; t = time.monotonic()\n"
        "from pipeline.engines import engine_identity\n"
        "engine_identity.identity('hf'); engine_identity.identity('vllm')\n"
        "print('torch' in sys.modules, round(time.monotonic() - t, 3))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported, seconds = done.stdout.split()
    assert imported == "False" and float(seconds) < 1.0
