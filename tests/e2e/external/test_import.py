"""Checkpoints quantized elsewhere (AutoRound's AutoGPTQ, AutoAWQ and llm-compressor exports of
tiny-llama), imported, evaluated against their base and served like a recipe's artifact."""

import json
import shutil

import pytest

from tests.conftest import cli
from tests.e2e.conftest import ONE_SIDE, needs_serving_env, results_path


def _entry(run_dir, stage="quantize"):
    return json.loads((run_dir / "manifest.json").read_text())["stages"][stage]


@pytest.mark.cpu_host
def test_run_with_an_auto_gptq_artifact_ends_with_the_summary(
    external, imported_eval, served_fp8, small_recipe, session_runs
):
    """The acceptance path, `make run MODEL=tiny-llama ARTIFACT=<auto_gptq folder>`, with vLLM
    evaluating and serving the checkpoint as shipped (AutoGPTQ's packing, vLLM's own loader).
    Test-sized: the eval settings of a recipe with a 1,024-token budget and no generation
    (`RECIPE=` picks whose settings apply; vLLM's answers are the eval tests'), served against
    the original's cached measurement (served_fp8's)."""
    from pipeline.engines.vllm import serving_env

    needs_serving_env()
    args = ["run", "--artifact", str(external["auto_gptq"]), "--recipe", str(small_recipe)]
    args += ["--backend", "vllm", *ONE_SIDE]
    if not serving_env.capabilities()["w4a16"]:
        result = cli(*args, runs=session_runs)
        assert result.returncode == 4 and "no W4A16" in result.stderr, result.stderr[-2000:]
        assert len(result.stderr.strip().splitlines()) == 1  # refused up front, one line
        pytest.skip("this host's vLLM has no W4A16 CPU kernel (AVX2 only): refusal checked")
    hf = imported_eval("auto_gptq")[0]["splits"]["heldout"]  # the same 1,533 tokens, float32
    result = cli(*args, runs=session_runs, timeout=1200)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout
    assert "tiny-llama × external-auto_gptq vs the original" in out
    for line in ("perplexity ratio", "mean KL", "checkpoint", "output tok/s", "eval gates"):
        assert line in out
    assert "quantize tiny-llama × external-auto_gptq: cached" in out  # the settings' recipe
    run_dir = session_runs / "tiny-llama" / "external-auto_gptq"  # changes no import input
    served = json.loads(results_path(run_dir, "serve").read_text())
    assert served["quantized"]["model_dir"].endswith("external/original")
    shipped = json.loads((run_dir / "external" / "original" / "config.json").read_text())
    assert shipped["quantization_config"]["quant_method"] == "gptq"
    vllm = json.loads(results_path(run_dir, "eval").read_text())
    assert vllm["backend"] == "vllm" and vllm["splits"]["heldout"]["tokens"] == 1533
    # bf16 against its own bf16 reference against float32, on the same 1,533 tokens (3 windows):
    # within 3× (on a host with vLLM's W4A16 CPU kernel, AVX-512 + AMX, 2026-12-02, against
    # float32 on 16,863 tokens: 4.34e-4 vs 2.04e-4, 2.12×; bf16 rounding of the kernel's own
    # order adds drift)
    assert 0.5 < vllm["splits"]["heldout"]["kl_mean"] / hf["kl_mean"] < 3


def test_import_records_the_format_and_the_path_taken(external, imported_eval, session_runs):
    _, result = imported_eval("auto_gptq")
    run_dir = session_runs / "tiny-llama" / "external-auto_gptq"
    q = _entry(run_dir)
    ext = q["metrics"]["external"]
    assert (ext["quant_method"], ext["packing"]) == ("gptq", "gptq v1")
    assert ext["producer"].startswith("AutoRound")
    assert "converted to compressed-tensors" in ext["hf_path"]
    assert "hf eval   converted to compressed-tensors (gptq converter)" in result.stdout
    # the converted copy is what hf evaluated; the shipped bytes are untouched
    original = run_dir / "external" / "original"
    for f in external["auto_gptq"].iterdir():
        assert (original / f.name).read_bytes() == f.read_bytes()
    converted = json.loads(
        (run_dir / "external" / "compressed-tensors" / "config.json").read_text()
    )
    assert converted["quantization_config"]["quant_method"] == "compressed-tensors"
    # sizes: the shipped tensors, against the W4A16 ideal (GPTQ adds g_idx and zero points)
    assert 1.0 <= q["metrics"]["ratio_to_ideal"] < 1.03
    assert q["metrics"]["quantized_modules"] == 28
    # where it loads, recorded for the card as for a quantized artifact (groups of 128)
    layouts = {r["tp"]: r["loads"] for r in q["metrics"]["layouts"]}
    assert layouts[1] and set(layouts) == {1, 2, 4, 8}


def test_the_same_quantization_drifts_alike_in_every_format(imported_eval):
    """One AutoRound quantization, saved as AutoGPTQ, AutoAWQ and llm-compressor checkpoints:
    converted (two formats) or native (compressed-tensors), the same drift within its SE."""
    runs = {fmt: imported_eval(fmt)[0]["splits"]["heldout"] for fmt in
            ("auto_gptq", "auto_awq", "llm_compressor")}  # fmt: skip
    native = runs["llm_compressor"]
    for fmt in ("auto_gptq", "auto_awq"):
        h = runs[fmt]
        assert abs(h["kl_mean"] - native["kl_mean"]) <= native["kl_mean_se"], fmt
        assert h["tokens"] == native["tokens"]
    assert 0 < native["kl_mean"] < 1e-2  # 4-bit round-to-nearest: real, small drift


def test_a_native_import_is_reused_like_a_converted_one(
    external, imported_eval, small_recipe, session_runs
):
    imported_eval("llm_compressor")  # compressed-tensors: no converted copy
    again = cli("eval", "--artifact", str(external["llm_compressor"]), "--recipe",
                str(small_recipe), "--backend", "hf", runs=session_runs)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count(": cached") == 2  # the import and the eval
    assert "hf eval   transformers loads it as it is" in again.stdout


def test_the_same_bytes_elsewhere_reuse_the_import(external, imported_eval, session_runs, tmp_path):
    imported_eval("auto_gptq")
    copy = tmp_path / "auto_gptq"  # same folder name: the same run dir
    shutil.copytree(external["auto_gptq"], copy)
    result = cli("quantize", "--import", str(copy), runs=session_runs)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ": cached" in result.stdout
    config = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**config, "do_sample": False}))
    result = cli("quantize", "--import", str(copy), runs=session_runs)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ": done in" in result.stdout  # changed bytes: imported again


def _config_only(src, dst, **changes):
    """A checkpoint folder's configs and tokenizer (refusals happen before weights are read)."""
    dst.mkdir()
    for f in src.iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, dst / f.name)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, **changes}))
    return dst


def test_a_mismatched_base_is_one_line_exit_2(external, tmp_path):
    """(Each field's message: tests/unit/external/test_match.py.)"""
    folder = _config_only(external["auto_gptq"], tmp_path / "other", vocab_size=8192)
    runs = tmp_path / "runs"
    result = cli("run", "--artifact", str(folder), runs=runs)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a quantization of tiny-llama" in lines[0]
    assert "vocab_size 8192 vs 4096" in lines[0]
    assert not runs.exists()  # refused before anything was written


def test_a_different_tokenizer_is_refused(external, tmp_path):
    folder = _config_only(external["auto_gptq"], tmp_path / "retokenized")
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]  # two ordinary tokens swap ids
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    result = cli("quantize", "--import", str(folder), runs=tmp_path / "runs")
    assert result.returncode == 2
    assert "its tokenizer differs" in result.stderr and "2 of the base's" in result.stderr


def test_a_hub_artifact_is_downloaded_pinned_and_imported(external, tmp_path):
    """ARTIFACT=org/name@revision through the real huggingface_hub client, against the hub
    stand-in on 127.0.0.1 (tests/e2e/publish/hub_server.py; huggingface.co cannot be reached)."""
    from tests.e2e.publish.hub_server import HubServer

    files = {f.name: f.read_bytes() for f in external["auto_gptq"].iterdir()}
    token = "hf_read_0123456789abcdef"
    with HubServer({token: "read"}) as hub:
        hub.seed("someone/tiny-llama-GPTQ", files)
        commit = hub.repo("someone/tiny-llama-GPTQ")["refs"]["main"]
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf")}
        env |= {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1", "HF_TOKEN": token}
        runs = tmp_path / "runs"
        result = cli("quantize", "--import", "someone/tiny-llama-GPTQ@main", runs=runs, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        missing = cli("quantize", "--import", "someone/nothing-here", runs=runs, env=env)
    run_dir = runs / "tiny-llama" / "external-someone--tiny-llama-GPTQ@main"
    q = _entry(run_dir)
    assert q["inputs"]["artifact"]["id"] == "someone/tiny-llama-GPTQ"
    assert q["inputs"]["artifact"]["revision"] == commit  # pinned to the commit it resolved to
    for name, data in files.items():
        assert (run_dir / "external" / "original" / name).read_bytes() == data
    for path in (p for p in run_dir.rglob("*") if p.is_file()):  # manifest, logs, configs
        assert token.encode() not in path.read_bytes()
    assert missing.returncode == 2
    assert "no model someone/nothing-here on the hub, or it is private" in missing.stderr


def test_dry_run_says_what_was_detected_and_writes_nothing(external, tmp_path):
    runs = tmp_path / "runs"
    result = cli("quantize", "--import", str(external["auto_awq"]), "--dry-run", runs=runs)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "format    awq (awq gemm) by AutoRound" in result.stdout
    assert "hf eval   converted to compressed-tensors (awq converter)" in result.stdout
    assert not runs.exists()
