"""Mistakes users make, each one line on stderr naming the value and what is valid, exit 2,
nothing created under RUNS_DIR (in-process: no model is loaded before these refusals)."""

import pytest
import yaml

from pipeline.cli.main import main
from tests.conftest import REPO

GPTQ = (REPO / "recipes" / "gptq.yaml").read_text()
FP8 = (REPO / "recipes" / "fp8.yaml").read_text()
_kv = yaml.safe_load((REPO / "recipes" / "fp8-kv.yaml").read_text())
_kv["quantization"]["quant_stage"]["quant_modifiers"]["QuantizationModifier"]["kv_cache_scheme"] = 1
FP8_KV_TRUE = yaml.safe_dump(_kv)
LONG = "x" * 300


def _file(tmp_path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


CASES = {
    "port out of range": (lambda t: ["serve", "--port", "70000"], "a port is 1–65535"),
    "infinite size": (
        lambda t: ["serve", "--cpu-kvcache-space-gib", "inf"],
        "cpu_kvcache_space_gib: Input should be a finite number",
    ),
    "utilization above 1": (
        lambda t: ["plan", "--gpu-memory-utilization", "1.5"],
        "gpu_memory_utilization: Input should be less than or equal to 1 (got 1.5)",
    ),
    "negative overhead": (
        lambda t: ["plan", "--overhead-gib", "-1"],
        "overhead_gib: Input should be greater than or equal to 0",
    ),
    "infinite GPU": (lambda t: ["plan", "--gpu", "inf"], "unknown GPU 'inf'"),
    "unknown scheme": (
        lambda t: ["quantize", "--recipe", _file(t, "s.yaml", GPTQ.replace("W4A16", "W4A17"))],
        "s.yaml:12: GPTQModifier: unknown scheme 'W4A17'; compressed-tensors presets: FP8,",
    ),
    "unknown scheme, dry run": (
        lambda t: [
            "quantize",
            "--dry-run",
            "--recipe",
            _file(t, "s.yaml", GPTQ.replace("W4A16", "W4A17")),
        ],
        "unknown scheme 'W4A17'",
    ),
    "preset not supported yet": (
        lambda t: ["quantize", "--recipe", _file(t, "n.yaml", GPTQ.replace("W4A16", "MXFP8A16"))],
        "scheme 'MXFP8A16' is a compressed-tensors preset this pipeline does not plan or serve yet",
    ),
    "search budget below every format": (
        lambda t: ["search", "--target-bits", "3"],
        "--target-bits 3: choose between 4.125 (every group W4A16, scales included) and 16",
    ),
    "search budget of the original": (
        lambda t: ["search", "--target-bits", "16"],
        "--target-bits 16: choose between 4.125",
    ),
    "search without a budget": (
        lambda t: ["search"],
        "the following arguments are required: --target-bits",
    ),
    "distributed quantize without calibration data": (
        lambda t: ["quantize", "--recipe", "fp8", "--nproc", "2"],
        "--nproc 2: recipe fp8 calibrates nothing",
    ),
    "distributed quantize with no process": (
        lambda t: ["quantize", "--recipe", "gptq", "--nproc", "0"],
        "--nproc 0: at least 1",
    ),
    "recipe not UTF-8": (
        lambda t: ["quantize", "--recipe", _file(t, "u.yaml", b"\xff\xfe bad")],
        "u.yaml: not UTF-8 text",
    ),
    "malformed JSONL line": (
        lambda t: [
            "quantize",
            "--recipe",
            _file(
                t,
                "j.yaml",
                GPTQ.replace("python-docs", _file(t, "d.jsonl", '{"text": "a"}\n{"text": b\n')),
            ),
        ],
        "d.jsonl:2: not JSON",
    ),
    "eval split checked before quantizing": (
        lambda t: [
            "run",
            "--recipe",
            _file(t, "e.yaml", FP8.replace("eval:", "eval:\n  split: nope", 1)),
        ],
        "eval data: split 'nope' of python-docs; valid: train, calibration, heldout",
    ),
    "eval file checked before quantizing": (
        lambda t: [
            "eval",
            "--recipe",
            _file(t, "f.yaml", FP8.replace("eval:", "eval:\n  dataset: /no/such.jsonl", 1)),
        ],
        "eval data file not found: /no/such.jsonl",
    ),
    "very long model name": (
        lambda t: ["quantize", "--model", f"org/{LONG}"],
        "unknown model 'org/xxx",
    ),
    "very long recipe name": (lambda t: ["quantize", "--recipe", LONG], "unknown recipe 'xxx"),
    "empty hub target": (lambda t: ["publish", "--repo", "hf://"], "'hf://' names no repo"),
    "empty model": (lambda t: ["quantize", "--model", ""], "no model given; valid: tiny-llama"),
    "revision of a local model": (
        lambda t: ["quantize", "--revision", "abc"],
        "--revision applies to hub models, not tiny-llama",
    ),
    "negative cache size": (lambda t: ["clean-cache", "--max-mib", "-5"], "--max-mib must be"),
    "tensor parallel size": (
        lambda t: ["serve", "--tensor-parallel-size", "3"],
        "tensor_parallel_size 3: vLLM refuses it for this model: its 4 attention heads do not "
        "divide by 3 (valid within a node: 1, 2, 4)",
    ),
    "context beyond the model's": (
        lambda t: ["serve", "--max-model-len", "99999"],
        "max_model_len 99,999 is longer than the model's max_position_embeddings",
    ),
    "vLLM dtype": (lambda t: ["serve", "--dtype", "foo"], "invalid choice: 'foo'"),
    "thread binding": (
        lambda t: ["serve", "--cpu-omp-threads-bind", "zz"],
        "cpu_omp_threads_bind: String should match pattern",
    ),
    "matrix that is not a mapping": (
        lambda t: ["nightly", "--matrix", _file(t, "m.yaml", "x")],
        "m.yaml: must be a mapping of keys (got 'x')",
    ),
    "kv_cache_scheme not a mapping (found by hypothesis)": (
        lambda t: [
            "quantize",
            "--dry-run",
            "--recipe",
            _file(t, "k.yaml", FP8_KV_TRUE),
        ],
        "QuantizationModifier: kv_cache_scheme must be a mapping (got 1)",
    ),
    "artifact with --nproc": (
        lambda t: ["quantize", "--import", str(t), "--nproc", "2"],
        "--nproc applies to quantizing with a recipe, not an imported artifact",
    ),
    "artifact that is no checkpoint": (
        lambda t: ["run", "--artifact", str(t)],
        "no config.json: not a Hugging Face checkpoint folder",
    ),
    "artifact not quantized": (
        lambda t: ["eval", "--artifact", str((t / "config.json").write_text("{}") and t)],
        "not a quantized checkpoint (config.json has no quantization_config)",
    ),
    "artifact neither folder nor hub id": (
        lambda t: ["serve", "--artifact", "no such/folder/x"],
        "is neither a folder nor a hub id (org/name[@revision])",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_mistake_is_one_line_exit_2_and_creates_nothing(
    case, tmp_path, monkeypatch, capsys, cpu_host_env
):
    """On a host that serves: a CPU host (the CUDA build where no GPU is visible refuses a serve
    before it reads the settings, exit 4)."""
    argv, message = CASES[case]
    runs = tmp_path / "runs"
    monkeypatch.setenv("RUNS_DIR", str(runs))
    try:
        code = main(argv(tmp_path))
    except SystemExit as e:  # argparse's own refusals exit the same way a user sees them
        code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert len(err[0]) < 700
    assert not runs.exists()


def test_scheme_names_are_compressed_tensors_presets():
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

    from pipeline.config.schemes import PRESET_NAMES, PRESETS

    assert set(PRESET_NAMES) == set(PRESET_SCHEMES) and set(PRESETS) <= set(PRESET_NAMES)


def test_debug_shows_the_traceback_of_a_mistake(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("PIPELINE_DEBUG", "0")  # restored (unset) after the test
    assert main(["quantize", "--recipe", "nope"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["quantize", "--recipe", "nope", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("error: unknown recipe")
