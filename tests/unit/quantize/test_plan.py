"""What a recipe needs and touches, decided from the config alone."""

import pytest

from pipeline.config import recipe
from pipeline.config.schemes import scheme_from_args
from pipeline.planning import geometry, weights

# Which recipes need calibration data is checked against llm-compressor itself in
# tests/e2e/quantize/test_calibration_rule.py (importing it takes ~20 s: not a unit test).


@pytest.mark.parametrize(
    "name, patterns, ignored",
    [
        ("lm_head", ["lm_head"], True),
        ("mlp.gate", ["re:.*mlp.gate$"], True),
        ("mlp.gate_proj", ["re:.*mlp.gate$"], False),
        ("self_attn.q_proj", ["q_proj"], True),
        ("self_attn.q_proj", ["k_proj"], False),
    ],
)
def test_ignore_patterns(name, patterns, ignored):
    assert weights.matches(name, patterns) is ignored


def test_schemes_from_presets_and_config_groups():
    assert scheme_from_args({"scheme": "w4a16"}).group_size == 128
    assert scheme_from_args({"scheme": {"FP8_DYNAMIC": ["Linear"]}}).weight_type == "float"
    custom = scheme_from_args(
        {"config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 64, "symmetric": False}}}}
    )
    assert (custom.name, custom.weight_bits, custom.group_size, custom.symmetric) == (
        "W4A16_ASYM_G64", 4, 64, False,
    )  # fmt: skip
    assert custom.activation_bits is None and scheme_from_args({}) is None


def test_scale_geometry_of_each_preset():
    """compressed-tensors 0.19's layouts, as tiny-llama's artifacts store them (their tensor
    bytes matched these sizes exactly, 2026-11-30): W8A16 groups of 128, FP8_BLOCK 128×128
    blocks, static FP8 one scale per tensor, FP8_DYNAMIC one per output channel."""
    from pipeline.config.schemes import PRESETS

    assert PRESETS["W8A16"].scale_count(256, 768) == 256 * 6
    assert PRESETS["FP8_BLOCK"].scale_count(256, 768) == 2 * 6
    assert PRESETS["FP8_BLOCK"].scale_count(4096, 14336) == 32 * 112
    assert PRESETS["FP8_BLOCK"].scale_count(200, 130) == 2 * 2  # partial blocks get a scale
    assert PRESETS["FP8"].scale_count(256, 768) == 1
    assert PRESETS["FP8_DYNAMIC"].scale_count(256, 768) == 256
    # FP4: NVFP4 one FP8 scale per 16 values, MX one E8M0 scale per 32 (tiny-llama's down_proj
    # stores weight_scale (256, 48) and (256, 24))
    assert PRESETS["NVFP4A16"].scale_count(256, 768) == 256 * 48
    assert PRESETS["MXFP4"].scale_count(256, 768) == 256 * 24


def test_nvfp4_ideal_is_four_bits_plus_an_fp8_scale_per_16_plus_global_scales(tmp_path):
    """The issue's known answer: params × (4 bits + one 8-bit scale per 16) / 8 + global scales
    (one per Linear for the weights, one more for NVFP4's activations; float32 as stored)."""
    from pipeline.core.paths import RECIPES_DIR
    from pipeline.models.tiny.spec import CONFIG

    linear = 4 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 768 * 256)
    rest = 2 * 4096 * 256 + 256 * (2 * 4 + 1)
    for name, globals_per_linear in (("nvfp4a16", 1), ("nvfp4", 2)):
        expected = linear * (4 + 8 / 16) / 8 + 28 * globals_per_linear * 4 + rest * 2
        got = weights.artifact_bytes(
            recipe.load(str(RECIPES_DIR / f"{name}.yaml")), geometry.of(CONFIG)
        )
        assert got == int(expected), name
    mx = weights.artifact_bytes(recipe.load(str(RECIPES_DIR / "mxfp4.yaml")), geometry.of(CONFIG))
    assert mx == int(linear * (4 + 8 / 32) / 8 + rest * 2)


@pytest.mark.parametrize(
    "scheme, weight_bytes, scales",
    [
        # tiny-llama: 4 layers × (q, o 256×256; k, v 128×256; gate, up 768×256; down 256×768)
        ("W8A16", 1, 4 * (2 * 256 * 2 + 2 * 128 * 2 + 2 * 768 * 2 + 256 * 6)),
        ("FP8_BLOCK", 1, 4 * (2 * 2 * 2 + 2 * 1 * 2 + 2 * 6 * 2 + 2 * 6)),
    ],
)
def test_artifact_bytes_count_each_scale(tmp_path, scheme, weight_bytes, scales):
    from pipeline.core.paths import RECIPES_DIR
    from pipeline.models.tiny.spec import CONFIG

    text = (RECIPES_DIR / "w4a16-rtn.yaml").read_text().replace("W4A16", scheme)
    path = tmp_path / "r.yaml"
    path.write_text(text)
    linear = 4 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 768 * 256)
    rest = 2 * 4096 * 256 + 256 * (2 * 4 + 1)  # embeddings, LM head, norms: 16-bit
    expected = linear * weight_bytes + scales * 2 + rest * 2
    assert weights.artifact_bytes(recipe.load(str(path)), geometry.of(CONFIG)) == expected


@pytest.mark.parametrize("machine", ["none", "h200x1", "h100x8"])
def test_the_dry_run_says_how_a_distributed_quantize_runs(tmp_path, monkeypatch, machine):
    """On a host without GPUs, on one H200 and on eight H100s (the stand-in nvidia-smi, whatever
    this host has): two processes need two GPUs where there are GPUs."""
    from tests.conftest import cli
    from tests.unit.core.test_devices import standin

    standin(monkeypatch, machine)
    argv = ["quantize", "--model", "llama3-70b", "--recipe", "gptq", "--dry-run", "--nproc", "2"]
    result = cli(*argv, runs=tmp_path)
    if machine == "h200x1":
        assert result.returncode == 2 and not result.stdout, result.stderr
        assert result.stderr.strip() == "error: --nproc 2: this host has 1 GPU(s), one per process"
    else:
        assert result.returncode in (0, 4), result.stderr  # 4: this host's RAM; plan printed
        assert "2 processes under torchrun (one GPU each on GPU hosts)" in result.stdout
    assert not (tmp_path / "llama3-70b").exists()


@pytest.mark.cpu_host  # on GPUs rank 0's shared offload holds one copy
def test_nproc_on_a_cpu_host_plans_a_copy_of_the_model_per_process(monkeypatch, tmp_path):
    """docs/recipes.md: on CPU hosts each gloo process holds its own copy (oneshot.py)."""
    import json

    from pipeline.cli.main import main

    monkeypatch.setenv("RUNS_DIR", str(tmp_path))
    one, two = (_dry_plan(main, monkeypatch, n) for n in (1, 2))
    mem1, mem2 = one["memory_bytes"], two["memory_bytes"]
    assert mem2["cpu_ram_peak_estimate"] == 2 * mem1["cpu_ram_peak_estimate"]
    assert two["processes"] == 2 and json.dumps(two).count("2 processes") >= 1


def _dry_plan(main, monkeypatch, nproc: int) -> dict:
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["quantize", "--recipe", "gptq", "--nproc", str(nproc), "--dry-run", "--json"])
    assert code == 0
    return json.loads(out.getvalue()[out.getvalue().index("{") :])


def test_one_quantize_is_planned_once_whoever_asks(tmp_path, monkeypatch):
    """The dry run, the chain's plan and the check before loading read one plan: built again
    only where what it reads changed (the calibration text held, once loaded)."""
    from pipeline.core.runs import Runs
    from pipeline.quantize import plan as quantize_plan
    from pipeline.quantize.request import QuantizeRequest
    from pipeline.quantize.stage import QuantizeStage

    q = QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", "gptq"), Runs(tmp_path))
    built = []
    real = quantize_plan.build
    monkeypatch.setattr(quantize_plan, "build", lambda *a: built.append(a) or real(*a))
    q.describe_plan()
    q.stage_plan()
    q.check_memory(None)
    assert len(built) == 1
