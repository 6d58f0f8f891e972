import json

import pytest

from pipeline.config import recipe
from pipeline.core.errors import UserError
from pipeline.models import aliases as models
from pipeline.models import architecture
from pipeline.models.tiny import spec
from pipeline.planning import geometry
from pipeline.quantize import plan as quantize_plan

# Parameter counts published on the models' hub pages (safetensors metadata).
KNOWN_PARAMS = {
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-8b": 8_030_261_248,
    "mistral-7b": 7_248_023_552,
    "qwen2.5-7b": 7_615_616_512,
    "qwen3-8b": 8_190_735_360,  # model card: 8.2B
    "mixtral-8x7b": 46_702_792_704,  # model card: 46.7B
    "qwen3-30b-a3b": 30_532_122_624,  # model card: 30.5B
    "llama3-405b": 405_853_388_800,  # model card: 405B
}
# Only the model card's rounded total at hand (exact counts: transformers on the meta device,
# tests/e2e/models/test_architecture_vs_transformers.py)
CARD_TOTALS = {"deepseek-v2-lite": 15.7e9, "qwen1.5-moe-a2.7b": 14.3e9, "deepseek-v3": 671e9}
VLLM_CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256}


@pytest.mark.parametrize("alias", list(models.ALIASES))
def test_alias_configs_are_bundled_and_match_published_sizes(alias):
    ref = models.resolve(alias)
    assert ref.hub_id == models.ALIASES[alias]
    config = models.load_config(ref)  # offline: from pipeline/model_configs
    if alias in CARD_TOTALS:
        assert architecture.total_params(config) == pytest.approx(CARD_TOTALS[alias], abs=0.05e9)
    else:
        assert architecture.total_params(config) == KNOWN_PARAMS[alias]


def test_hub_ids_and_local_folders_are_accepted(tmp_path):
    assert models.resolve("org/some-model").source == "hub"
    assert models.resolve("org/some-model").name == "org--some-model"
    (tmp_path / "config.json").write_text(json.dumps(spec.CONFIG))
    ref = models.resolve(str(tmp_path))
    assert ref.source == "local" and models.load_config(ref)["hidden_size"] == 256


def test_unknown_model_lists_the_aliases():
    with pytest.raises(UserError) as e:
        models.resolve("llama-9000")
    assert "llama3-70b" in str(e.value) and "tiny-llama" in str(e.value)


def test_tiny_llama_shape_fits_vllm_cpu_and_group_128():
    lins = architecture.linears(spec.CONFIG)
    assert all(lin.in_features % 128 == 0 and lin.out_features % 128 == 0 for lin in lins)
    assert architecture.head_dim(spec.CONFIG) in VLLM_CPU_HEAD_SIZES
    assert spec.CONFIG["architectures"] == ["LlamaForCausalLM"]


def test_group_size_that_does_not_divide_a_linear_is_refused_from_the_config(tmp_path):
    config = {**spec.CONFIG, "intermediate_size": 704}  # 704 = 5.5 × 128
    rf = recipe.load("gptq")
    with pytest.raises(UserError, match=r"group size 128 does not divide .*down_proj.*704"):
        quantize_plan.check_fit(rf, geometry.of(config), "odd-model")
    quantize_plan.check_fit(
        recipe.load("fp8"), geometry.of(config), "odd-model"
    )  # channel-wise: fine


def test_plan_for_llama3_70b_gptq_fits_one_80gb_gpu_with_sequential_onloading():
    config = models.load_config(models.resolve("llama3-70b"))
    rf = recipe.load("gptq")
    cal = {"dataset": "python-docs", "split": "calibration", "samples": 512, "max_seq_length": 2048}
    plan = quantize_plan.build(
        rf, geometry.of(config), {"name": "llama3-70b"}, cal, gpus=["H100 80GB"]
    )
    mem = plan["memory_bytes"]
    assert plan["pipeline"] == "sequential" and "one decoder layer at a time" in plan["placement"]
    assert mem["weights_bf16"] == 2 * KNOWN_PARAMS["llama3-70b"]
    # W4A16: 4-bit Linears + bf16 embeddings / lm_head ≈ 0.28 of bf16
    assert 0.25 < mem["artifact_estimate"] / mem["weights_bf16"] < 0.32
    assert mem["device_peak_estimate"] < 80e9 and plan["fits_one_80gb_gpu"]


def test_a_cpu_hosts_plan_never_judges_its_cpu_figure_as_a_gpus():
    """On a CPU host the 70B GPTQ holds ~370 GiB of CPU RAM; the 80 GB verdict is about what one
    GPU would hold (one layer's working set), and the line says which figure is which."""
    config = models.load_config(models.resolve("llama3-70b"))
    cal = {"dataset": "python-docs", "split": "calibration", "samples": 512, "max_seq_length": 2048}
    g = geometry.of(config)
    cpu = quantize_plan.build(recipe.load("gptq"), g, {"name": "llama3-70b"}, cal, gpus=[])
    gpu = quantize_plan.build(recipe.load("gptq"), g, {"name": "llama3-70b"}, cal, gpus=["H100"])
    mem = cpu["memory_bytes"]
    assert mem["device_peak_estimate"] == mem["cpu_ram_peak_estimate"] > 300 * 2**30
    assert mem["gpu_peak_estimate"] == gpu["memory_bytes"]["device_peak_estimate"] < 80e9
    line = next(x for x in quantize_plan.render(cpu).splitlines() if x.startswith("memory"))
    gib = mem["gpu_peak_estimate"] / 2**30
    assert f"no GPU here (the CPU is the device); a GPU host's device peak ~{gib:.1f} GiB" in line
    assert line.count("fits one 80 GB GPU: yes") == 1 and "device peak ~369" not in line
