"""Quantize tiny-llama with every shipped recipe on CPU (real llm-compressor) and check the
artifacts: tensor formats, sizes, reload in transformers, and the loss a forward pass gives."""

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.config import recipe
from pipeline.core.errors import INTERRUPTED
from pipeline.core.same_tensors import differences
from pipeline.engines.vllm import serving_env
from pipeline.gpu_host import resume_check as gpu_resume_check
from pipeline.quantize.artifact import tensors
from tests.conftest import REPO, SERVE_PYTHON, cli

pytestmark = pytest.mark.slow
LAYER = "model.layers.0.mlp.down_proj"  # 768 → 256
# What compressed-tensors stores for that module, per recipe: name suffix → (dtype, shape).
EXPECTED = {
    "fp8": {"weight": ("F8_E4M3", (256, 768)), "weight_scale": ("BF16", (256, 1))},
    "fp8-kv": {"weight": ("F8_E4M3", (256, 768)), "weight_scale": ("BF16", (256, 1))},
    "int8": {"weight": ("I8", (256, 768)), "weight_scale": ("BF16", (256, 1))},
    "gptq": {"weight_packed": ("I32", (256, 96)), "weight_scale": ("BF16", (256, 6))},
    "w4a16-rtn": {"weight_packed": ("I32", (256, 96)), "weight_scale": ("BF16", (256, 6))},
    "autoround": {"weight_packed": ("I32", (256, 96)), "weight_scale": ("BF16", (256, 6))},
    "fp8-block": {"weight": ("F8_E4M3", (256, 768)), "weight_scale": ("BF16", (2, 6))},
    "w8a16": {"weight_packed": ("I32", (256, 192)), "weight_scale": ("BF16", (256, 6))},
    # FP4: two E2M1 values per byte; NVFP4 one FP8 scale per 16 and a global scale per tensor
    # (and one for the inputs, calibrated), MX one E8M0 scale per 32
    "nvfp4a16": {
        "weight_packed": ("U8", (256, 384)),
        "weight_scale": ("F8_E4M3", (256, 48)),
        "weight_global_scale": ("F32", (1,)),
    },
    "nvfp4": {
        "weight_packed": ("U8", (256, 384)),
        "weight_scale": ("F8_E4M3", (256, 48)),
        "input_global_scale": ("F32", (1,)),
    },
    "mxfp4": {"weight_packed": ("U8", (256, 384)), "weight_scale": ("U8", (256, 24))},
    "awq": {
        "weight_packed": ("I32", (256, 96)),
        "weight_scale": ("BF16", (256, 6)),
        "weight_zero_point": ("I32", (32, 6)),
    },
}
# A forward pass on held-out text: mean loss may move this much (relative) from the original.
LOSS_TOLERANCE = {
    "fp8": 0.02,
    "fp8-kv": 0.02,
    "fp8-block": 0.02,
    "w8a16": 0.01,
    "int8": 0.03,
    "gptq": 0.08,
    "awq": 0.08,
    "autoround": 0.08,
    "w4a16-rtn": 0.12,
    "nvfp4a16": 0.08,
    "nvfp4": 0.08,
    "mxfp4": 0.08,
}


@pytest.mark.parametrize("name", recipe.artifact_recipes())
def test_artifact_format_and_manifest(quantized, name):
    run = quantized(name)
    table = tensors(run / "artifact")
    got = {
        k.removeprefix(LAYER + "."): (v.dtype, v.shape)
        for k, v in table.items()
        if k.startswith(LAYER + ".")
    }
    for suffix, expected in EXPECTED[name].items():
        assert got[suffix] == expected, (suffix, got)
    assert table["lm_head.weight"].dtype == "BF16"  # ignored by every recipe
    # kv_cache_scheme: one calibrated per-tensor scale for K and one for V in every layer
    kv_scales = {k for k in table if k.endswith(("self_attn.k_scale", "self_attn.v_scale"))}
    assert len(kv_scales) == (8 if recipe.load(name).kv_cache_scheme() else 0)
    if kv_scales:
        from safetensors import safe_open

        with safe_open(run / "artifact" / "model.safetensors", "pt") as f:
            assert all(float(f.get_tensor(k)) > 0 for k in kv_scales)

    manifest = json.loads((run / "manifest.json").read_text())
    entry = manifest["stages"]["quantize"]
    assert entry["status"] == "done" and len(entry["fingerprint"]) == 64
    assert entry["inputs"]["libraries"]["llmcompressor"].startswith("0.14")
    # what quantized it (the header names the recipe of the run's latest stage: an eval with
    # other settings, as the eval tests' drift-only copies, names its own file)
    shipped = recipe.load(name)
    assert manifest["recipe"]["name"] == name
    assert entry["inputs"]["recipe_sha256"] == shipped.section_sha256("quantization", "calibration")
    m = entry["metrics"]
    assert m["quantized_modules"] == 28  # 7 Linears × 4 layers; lm_head stays bf16
    assert m["quantized_tensor_bytes"] + m["unquantized_tensor_bytes"] == m["tensor_bytes"]
    assert m["tensor_bytes"] < m["artifact_bytes"] and m["peak_rss_bytes"] > 0
    # Scales (+ zero points) cost a little over the weights' bits alone, never less; with the
    # scheme's scales counted (the planner's geometry) what remains is packing: within 2%.
    assert 1.0 <= m["ratio_to_theoretical"] < 1.05
    assert 1.0 <= m["ratio_to_ideal"] < 1.02
    expected_ratio = (
        0.70 if name in ("fp8", "fp8-kv", "fp8-block", "int8", "w8a16") else 0.55
    )  # 3.1M of 5.2M params quantized
    assert abs(m["ratio_to_bf16"] - expected_ratio) < 0.02
    assert (run / "artifact" / "recipe.yaml").is_file()
    samples = m["calibration_samples"]
    calibrated = ("autoround", "awq", "fp8-kv", "gptq", "int8", "nvfp4")
    assert samples == (64 if name in calibrated else 0)
    assert not (run / "artifact.checkpoints").exists()  # kept layers go once the artifact is in
    refused = "layers not kept for resuming: AutoRound hands each layer's quantized outputs"
    assert (refused in quantized.printed[name]) == (name == "autoround")


def _heldout_loss(model_dir) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.data import corpus

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    texts = corpus.chunks(corpus.read_split("heldout"))[:12]
    enc = tok(texts, max_length=256, truncation=True, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    with torch.no_grad():
        return model(**enc, labels=labels).loss.item()


@pytest.fixture(scope="session")
def original_loss(tiny_model):
    return _heldout_loss(tiny_model)


@pytest.mark.parametrize("name", recipe.artifact_recipes())
def test_artifact_reloads_in_transformers_with_loss_close_to_original(
    quantized, original_loss, name
):
    loss = _heldout_loss(quantized(name) / "artifact")
    assert abs(loss - original_loss) / original_loss < LOSS_TOLERANCE[name], (loss, original_loss)


def test_rerun_is_cached_and_force_redoes(quantized, session_runs):
    run = quantized("fp8")
    before = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    again = cli("quantize", "--recipe", "fp8", runs=session_runs)
    assert again.returncode == 0 and "cached" in again.stdout
    after = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert after == before
    forced = cli("quantize", "--recipe", "fp8", "--force", runs=session_runs)
    assert forced.returncode == 0 and "done in" in forced.stdout
    redone = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert redone["status"] == "done" and redone["fingerprint"] == before["fingerprint"]


def _stopped_at_layer(
    run: Path,
    runs: Path,
    how: signal.Signals,
    layer: int,
    samples: int | None,
    recipe_name: str = "gptq",
    calibration_pass: int = 0,
) -> tuple[int, str]:
    """A quantize stopped once decoder layer `layer` of calibration pass `calibration_pass` is
    kept (its checkpoint renamed into place: `pass <p> subgraph <layer>` in progress.json,
    subgraph 0 being the embeddings'): Ctrl-C as a terminal sends it (SIGINT to the whole
    process group: the stage's forked child too), or kill -9. `samples` None: the recipe's."""
    unit = f"pass {calibration_pass} subgraph {layer}"
    command = ["quantize", "--recipe", recipe_name]
    command += ["--num-samples", str(samples)] if samples else []
    started = time.time()  # an earlier attempt's progress.json may already name the layer

    # SIGINT as a terminal's process has it: a suite started in the background of a script
    # (`.ci/run &`) ignores it, and every process it starts would inherit that
    def interruptible():
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = gpu_resume_check.held_at(unit, command, runs, cwd=REPO, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, preexec_fn=interruptible)  # fmt: skip
    progress = run / "artifact.checkpoints" / "progress.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        assert proc.poll() is None, "finished before it could be stopped"
        with contextlib.suppress(OSError, ValueError):
            fresh = progress.stat().st_mtime >= started  # written by this attempt
            if fresh and unit in json.loads(progress.read_text())["done"]:
                break
        time.sleep(0.05)
    os.killpg(proc.pid, how)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_a_killed_run_resumes_at_its_first_unfinished_layer_with_the_same_bytes(tmp_path):
    """Ctrl-C: one line, exit 130, recorded `interrupted`, every path the manifest names there,
    the finished layers kept beside (never where an artifact is looked for). Another input:
    those discarded, said in one line. kill -9 at a random layer: the entry stays `running`;
    the same command then resumes at the first unfinished layer and writes the tensors an
    uninterrupted run writes, bit for bit, the manifest saying from where — after one kept
    layer's bytes are corrupted (discarded by its sha256, redone). gpu-check's resume row holds
    here, and fails where nothing resumes."""
    runs = tmp_path / "runs"
    run = runs / "tiny-llama" / "gptq"
    code, err = _stopped_at_layer(run, runs, signal.SIGINT, 1, samples=6)
    entry = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert code == 130 and entry["status"] == "interrupted", err[-2000:]
    assert err.strip().splitlines()[-1] == entry["error"] == INTERRUPTED
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert all((run / path).exists() for path in entry["outputs"].values())
    assert not (run / "artifact").exists() and (run / "artifact.checkpoints").is_dir()

    layer = random.choice([1, 2, 3])  # of tiny-llama's 4: the last is never kept
    code, err = _stopped_at_layer(run, runs, signal.SIGKILL, layer, samples=8)
    assert code == -signal.SIGKILL and not (run / "artifact").exists()
    (said,) = [line for line in err.splitlines() if line.startswith("not resuming:")]
    assert said.startswith("not resuming: ") and "its inputs differ (" in said, said
    entry = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert entry["status"] == "running"
    # a host crash's torn write, at the same size: that layer is redone, the ones before kept
    torn = random.randint(1, layer)
    kept_file = run / "artifact.checkpoints" / f"pass-0-subgraph-{torn:04d}.safetensors"
    data = bytearray(kept_file.read_bytes())
    data[-1] ^= 0xFF
    kept_file.write_bytes(bytes(data))

    result = cli("quantize", "--recipe", "gptq", "--num-samples", "8", runs=runs)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"discarded and redone: {kept_file.name} (sha256 differs)" in result.stderr
    resumed = re.search(r"resuming at layer (\d) of 4 \(((\d) done|the embeddings' subgraph kept), "
                        r"saves ~\d+ s\)", result.stderr)  # fmt: skip
    assert resumed and int(resumed[1]) == torn, result.stderr[-2000:]
    entry = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert entry["status"] == "done" and entry["metrics"]["resumed"]["kept"] == torn - 1
    assert f"  resumed   at layer {torn} of 4: {torn - 1} kept" in result.stdout
    assert not list(run.glob("*artifact.*"))  # no staging folder, no checkpoints left

    whole = cli("quantize", "--recipe", "gptq", "--num-samples", "8", runs=tmp_path / "whole")
    assert whole.returncode == 0 and "resuming" not in whole.stderr
    whole = tmp_path / "whole" / "tiny-llama" / "gptq" / "artifact"
    assert differences(run / "artifact", whole) == []

    # gpu-check's resume row, as a GPU host runs it (at 8 samples): held and killed once layer
    # 1 is kept, resumed at layer 2, these bytes; run again where the artifact is made, it fails
    found = gpu_resume_check.check(tmp_path / "row", whole, samples=8)
    assert found["why"] is None and found["detail"].startswith("resuming at layer 2 of 4 (1 done")
    again = gpu_resume_check.check(tmp_path / "row", whole, samples=8)
    assert again["why"] == "the run ended before a layer was kept: nothing to resume"


# Every other recipe layer_checkpoints.RESUMABLE covers, killed where its own path differs:
# AWQ's smoothing, int8's second pass (GPTQ after SmoothQuant's pass: the first replayed whole),
# NVFP4's global scales, fp8-kv's KV observers; nvfp4 killed as every layer is kept (the save).
# (pass, layer, samples): AWQ and int8 calibrate slowly at the recipe's 64 samples (~190 s and
# ~60 s a run here), so they resume at 8 against an uninterrupted run at 8; the others against
# the session's run of the recipe.
RESUMED = {"awq": (0, 1, 8), "int8": (1, 1, 8), "nvfp4": (0, 4, None), "fp8-kv": (0, 1, None)}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_each_resumable_recipe_resumes_to_the_same_bytes(quantized, tmp_path, name):
    """kill -9 once a layer is kept; the same command resumes there and writes what an
    uninterrupted run of the recipe wrote, tensor for tensor."""
    calibration_pass, layer, samples = RESUMED[name]
    runs = tmp_path / "runs"
    run = runs / "tiny-llama" / name
    code, err = _stopped_at_layer(run, runs, signal.SIGKILL, layer, samples, name,
                                  calibration_pass)  # fmt: skip
    assert code == -signal.SIGKILL and not (run / "artifact").exists(), err[-2000:]
    fewer = ["--num-samples", str(samples)] if samples else []
    result = cli("quantize", "--recipe", name, *fewer, runs=runs)
    assert result.returncode == 0, result.stderr[-2000:]
    if layer == 4:  # the last decoder layer: only the save was left
        assert "resuming at the save (all 4 layers kept" in result.stderr, result.stderr[-2000:]
    else:
        where = f" of pass {calibration_pass + 1}" if calibration_pass else ""
        at = f"resuming at layer {layer + 1} of 4{where}"
        assert at in result.stderr, result.stderr[-2000:]
    whole = quantized(name) if not samples else tmp_path / "whole" / "tiny-llama" / name
    if samples:
        assert cli("quantize", "--recipe", name, *fewer, runs=tmp_path / "whole").returncode == 0
    assert differences(run / "artifact", whole / "artifact") == []


def test_a_run_killed_on_one_machine_resumes_on_another_from_the_bucket(
    quantized, s3, tmp_path, monkeypatch
):
    """RUNS_DIR in S3 (moto's server): each kept layer is committed with its run folder, so a
    machine that never saw the run (its local mirror removed: what a nightly retry on another
    node starts from; the model's own cache is shared, as a hub cache would be) resumes from
    the bucket's layers and writes the bytes of an uninterrupted run."""
    from pipeline.core.paths import mirror_root

    url = s3.bucket() + "/runs"
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    run = mirror_root(url) / "tiny-llama" / "gptq"
    argv = ["quantize", "--recipe", "gptq"]
    proc = gpu_resume_check.held_at("pass 0 subgraph 2", argv, url, cwd=REPO,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    kept = "artifact.checkpoints/pass-0-subgraph-0002.safetensors"
    deadline = time.time() + 300
    while kept not in _stored_files(url, "tiny-llama/gptq"):  # held once it is committed
        assert proc.poll() is None and time.time() < deadline, "never kept layer 2"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    shutil.rmtree(mirror_root(url))  # the other machine has none of it
    result = cli("quantize", "--recipe", "gptq", runs=url, env=s3.env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resuming at layer 3 of 4 (2 done" in result.stderr, result.stderr[-2000:]
    assert differences(run / "artifact", quantized("gptq") / "artifact") == []


def _stored_files(url: str, rel: str) -> dict:
    from tests.unit.core.stored_folders import stored_manifest

    with contextlib.suppress(FileNotFoundError):
        return stored_manifest(url, rel).get("objectstore", {}).get("files", {})
    return {}


@pytest.fixture(scope="session")
def vllm_caps() -> dict:
    from pipeline.engines.vllm import serving_env

    if not serving_env.available():
        pytest.skip("serving env not built (make setup)")
    return serving_env.capabilities()


# fp8 is loaded and generates through `vllm serve` in tests/e2e/serve (served_fp8), gptq in
# the W4A16 serve test (its chat and completion smoke checks)
@pytest.mark.parametrize("name", ["int8", "awq"])
def test_artifact_loads_and_generates_in_vllm(quantized, vllm_caps, name):
    if recipe.load(name).scheme().weight_bits == 4 and not vllm_caps["w4a16"]:
        pytest.skip("this CPU lacks AVX-512: vLLM's AVX2 CPU kernels have no W4A16 GEMM")
    script = REPO / "pipeline" / "vllm_scripts" / "generate.py"
    env = serving_env.offline_env()
    result = subprocess.run(
        [str(SERVE_PYTHON), str(script), str(quantized(name) / "artifact"), "The list type"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stderr[-3000:]  # vLLM's CPU engine may exit 134 after success
    out = json.loads(lines[-1])
    assert out["quantization"] == "compressed-tensors"
    assert len(out["texts"]) == 1 and out["texts"][0].strip()


@pytest.mark.gpu
def test_fp8_quantize_on_gpu_uses_cuda(quantized):
    import torch

    assert torch.cuda.is_available()
    entry = json.loads((quantized("fp8") / "manifest.json").read_text())["stages"]["quantize"]
    assert entry["environment"]["gpus"]
