"""A model zoo: small random-init models of each supported family (pipeline/models/zoo.py),
each through quantize with FP8 and a W4A16 recipe, the reload check, the planner's predicted
artifact size, and a short hf eval. MoE families use GPTQ (calibration through every expert);
the dense ones round-to-nearest W4A16, which needs no data (the calibrating recipes run on
tiny-llama elsewhere). Serving the zoo is left to hosts with time to spare (not run here)."""

import json
import re
from pathlib import Path

import pytest

from pipeline.config import recipe
from pipeline.core.same_tensors import differences
from pipeline.models import architecture
from pipeline.models.zoo import FAMILIES, shrunk_config
from pipeline.planning import geometry
from pipeline.planning.weights import artifact_bytes
from pipeline.quantize.artifact import tensors
from tests.conftest import REPO, cli, scratch

pytestmark = pytest.mark.slow
MOE = {"mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite"}
CALIBRATION = ["--num-samples", "16", "--max-seq-length", "128"]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    from pipeline.models.zoo import build

    root = tmp_path_factory.mktemp("zoo")
    return {alias: build(alias, root / alias) for alias in FAMILIES}


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory):
    with scratch(tmp_path_factory, "zoo-runs") as runs:
        yield runs


def _short(name: str, folder: Path) -> str:
    """The shipped recipe with a 512-token eval, its lm-eval task on 8 documents (added where
    the recipe has none) and 4 answers of 16 tokens: drift, lm-eval and generation on the same
    model is what the zoo checks."""
    text = (REPO / "recipes" / f"{name}.yaml").read_text().replace("16384", "512")
    text = re.sub(r"\n  tasks:.*?\n(?=  gates:)", "\n", text, flags=re.S)
    task = "  tasks:\n    - task: pydoc_word_order\n      metric: acc\n      limit: 8\n"
    task += "  generation:\n    limit: 4\n    max_new_tokens: 16\n"  # 4 short answers
    text = text.replace("\n  gates:", f"\n{task}  gates:", 1)
    path = folder / f"{name}.yaml"
    path.write_text(text.replace("context_length: 512", "context_length: 256"))  # > window
    return str(path)


@pytest.fixture(scope="module")
def short_eval(tmp_path_factory) -> str:
    return _short("fp8", tmp_path_factory.mktemp("recipes"))


def _w4a16(alias: str) -> str:
    return "gptq" if alias in MOE else "w4a16-rtn"


@pytest.mark.parametrize("alias", FAMILIES)
def test_zoo_quantizes_reloads_and_matches_the_plan(zoo, zoo_runs, short_eval, alias):
    for name in (short_eval, _w4a16(alias)):
        args = CALIBRATION if name == "gptq" else []
        result = cli("quantize", "--model", str(zoo[alias]), "--recipe", name, *args, "--json",
                     runs=zoo_runs)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
        (stage,) = json.loads(result.stdout)["stages"]
        m = stage["metrics"]
        assert m["ratio_to_theoretical"] >= 1.0
        if alias == "mixtral-8x7b":  # plain from_pretrained leaves its experts out; the view
            reload = m["reload"]  # with the names transformers maps loads (moe_view.py)
            assert reload["transformers"] is False and reload["hf_view"] is True, reload
            assert reload["missing"]["count"] == 4 and "experts.N.w1" in reload["reason"]
        else:
            assert m["reload"] == {"transformers": True, "reason": None}
        config = json.loads((zoo[alias] / "config.json").read_text())
        if name == "gptq":  # calibrated MoE: the router's choices were counted
            routed = m["routing"]
            assert routed["moe_layers"] == architecture.moe_layers(config) > 0, routed
            assert routed["experts"] == 8 and routed["tokens_routed"] > 0, routed
        rf = recipe.load(name)
        built = sum(t.nbytes for t in tensors(Path(stage["paths"]["artifact"])).values())
        assert artifact_bytes(rf, geometry.of(config)) == pytest.approx(built, rel=0.01), name


@pytest.mark.parametrize("alias", FAMILIES)
def test_zoo_model_free_fp8_gives_oneshots_tensors(zoo, zoo_runs, short_eval, alias, tmp_path,
                                                   monkeypatch):  # fmt: skip
    """fp8 took the model-free path above (the default for a data-free recipe): the same
    tensors as oneshot, MoE experts and routers included, under the same names."""
    from tests.e2e.quantize.test_model_free import oneshot_artifact, same_quantization_config

    run = zoo_runs / zoo[alias].name / "fp8"
    q = json.loads((run / "manifest.json").read_text())["stages"]["quantize"]
    assert q["metrics"]["path"] == "model-free"
    oneshot = oneshot_artifact(str(zoo[alias]), short_eval, tmp_path, monkeypatch)
    assert differences(run / "artifact", oneshot) == []
    same_quantization_config(run / "artifact", oneshot)


@pytest.mark.parametrize("alias", FAMILIES)
def test_zoo_evaluates_on_the_hf_backend(zoo, zoo_runs, short_eval, alias):
    result = cli("eval", "--model", str(zoo[alias]), "--recipe", short_eval, "--backend", "hf",
                 "--json", runs=zoo_runs)  # fmt: skip
    outcome = json.loads(result.stdout)
    assert "Traceback" not in result.stderr
    # random weights: the recipe's quality gates may fail (exit 3); the results are complete
    assert result.returncode in (0, 3), result.stderr[-3000:]
    (ev,) = [s for s in outcome["stages"] if s["stage"] == "eval"]
    results = json.loads(open(ev["paths"]["results"]).read())
    heldout = results["splits"]["heldout"]
    assert heldout["tokens"] >= 500 and heldout["kl_mean"] >= 0
    assert 0 < heldout["ppl_ratio"] < 2  # random weights, but the same ones on both sides
    fused = alias in MOE  # transformers 5 fuses every MoE family's experts into 3-D tensors
    assert ("MoE experts dequantized" in results["dtype"]) is fused, results["dtype"]
    (task,) = results["tasks"]  # lm-eval scored the drift's own model object
    assert task["samples"] == 8 and task["quantized_dtype"] == results["dtype"]


# Data-free recipes besides fp8 (above); vllm-fp8 is vLLM's online FP8: no artifact for hf.
# Each MoE family with a format the hf eval loads through the pipeline's view (fp8-block,
# nvfp4a16) and one it loads as is, Mixtral (whose expert names need the view too) with three;
# every recipe on two families: what differs is the family's expert layout and the format's
# tensors, not every pair of them (all 20 pairs passed on 2026-12-05 before this cut).
MOE_RECIPES = [
    ("mixtral-8x7b", "fp8-block"), ("mixtral-8x7b", "w4a16-rtn"), ("mixtral-8x7b", "mxfp4"),
    ("qwen1.5-moe-a2.7b", "nvfp4a16"), ("qwen1.5-moe-a2.7b", "w8a16"),
    ("qwen3-30b-a3b", "fp8-block"), ("qwen3-30b-a3b", "mxfp4"),
    ("deepseek-v2-lite", "nvfp4a16"), ("deepseek-v2-lite", "w4a16-rtn"),
    ("deepseek-v2-lite", "w8a16"),
]  # fmt: skip


@pytest.mark.parametrize("alias, recipe_name", MOE_RECIPES)
def test_moe_evaluates_every_data_free_recipe(zoo, zoo_runs, tmp_path, alias, recipe_name):
    """transformers 5.17 cannot take FP8-block or NVFP4 experts as llm-compressor writes them,
    nor Mixtral's expert names: the hf eval loads the pipeline's view (moe_view.py), drift and
    lm-eval on the same model; the manifest says what plain from_pretrained does."""
    name = _short(recipe_name, tmp_path)
    result = cli("eval", "--model", str(zoo[alias]), "--recipe", name, "--backend", "hf",
                 "--json", runs=zoo_runs)  # fmt: skip
    assert "Traceback" not in result.stderr
    assert result.returncode in (0, 3), result.stderr[-3000:]
    stages = {s["stage"]: s for s in json.loads(result.stdout)["stages"]}
    results = json.loads(open(stages["eval"]["paths"]["results"]).read())
    assert results["splits"]["heldout"]["kl_mean"] > 0
    (task,) = results["tasks"]
    assert task["quantized_dtype"] == results["dtype"], (task, results["dtype"])
    manifest = json.loads((zoo_runs / alias / recipe_name / "manifest.json").read_text())
    reload = manifest["stages"]["quantize"]["metrics"]["reload"]
    viewed = alias == "mixtral-8x7b" or recipe_name in ("fp8-block", "nvfp4a16")
    assert reload["transformers"] is not viewed and bool(reload.get("hf_view")) is viewed, reload


def test_mixtral_card_names_vllm_as_its_loader(zoo, zoo_runs, short_eval, tmp_path):
    """Published as a user would download it: the card's Python loader is vLLM's, with the
    reason; the hub gets no transformers snippet; publish says so on the terminal."""
    cli("eval", "--model", str(zoo["mixtral-8x7b"]), "--recipe", short_eval, runs=zoo_runs)
    target = f"file://{tmp_path / 'published'}"
    result = cli("publish", "--model", str(zoo["mixtral-8x7b"]), "--recipe", short_eval,
                 "--repo", target, "--ignore-gates", runs=zoo_runs)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "note: AutoModelForCausalLM.from_pretrained does not load this artifact" in result.stdout
    from huggingface_hub import ModelCard

    card = ModelCard((tmp_path / "published" / "README.md").read_text())
    assert card.data.library_name is None
    assert "from vllm import LLM" in card.text and "from transformers import" not in card.text
    assert "4 parameters left randomly initialised" in card.text
    assert "Loads in vLLM 0.32 at" in card.text  # a MoE artifact's layouts, EP rows among them
    assert "with `--enable-expert-parallel`" in card.text


@pytest.mark.parametrize("alias", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_moe_drift_is_that_of_the_weights_dequantized_by_hand(
    zoo, zoo_runs, short_eval, alias, tmp_path, monkeypatch
):
    """The hf backend's MoE path (experts dequantized by compressed-tensors into transformers'
    fused layout) scores the same tokens against the same reference as a plain float32 model
    of the artifact's weights dequantized here (for FP8, with per-token FP8 activations where
    compressed-tensors applies them): mean KL within one standard error."""
    from pipeline.core.runs import Runs
    from pipeline.eval import drift
    from pipeline.eval.backends import hf
    from pipeline.eval.stage import EvalStage, _score
    from pipeline.quantize.request import QuantizeRequest
    from pipeline.quantize.stage import QuantizeStage
    from tests.e2e.models import dequant_by_hand

    monkeypatch.setenv("RUNS_DIR", str(zoo_runs))
    runs = Runs(Path(zoo_runs))
    q = QuantizeStage.prepare(QuantizeRequest.named(str(zoo[alias]), short_eval), runs)
    stage = EvalStage.prepare(q, backend="hf")
    stage.quantize.load_inputs()
    stage._tokenize()
    refs, *_ = stage._references(hf, None)  # references first; no answers asked for
    windows, ref = [stage._windows["heldout"]], [refs["heldout"]]
    for name in (short_eval, "gptq"):
        request = QuantizeRequest.named(str(zoo[alias]), name, num_samples=16, max_seq_length=128)
        q = QuantizeStage.prepare(request, runs)
        got = drift.summarize(_score(hf, hf.load(q.artifact_for("hf")), windows, ref)[0])
        by_hand = dequant_by_hand.write(q.artifact, tmp_path / q.recipe.name)
        model = hf.load(by_hand)
        if q.recipe.scheme().activation_bits:
            dequant_by_hand.fp8_dynamic_activations(model, q.artifact)
        want = drift.summarize(_score(hf, model, windows, ref)[0])
        assert got["kl_mean"] > 0 and want["kl_mean"] > 0
        se = max(got["kl_mean_se"], want["kl_mean_se"])
        assert abs(got["kl_mean"] - want["kl_mean"]) <= se, (name, got["kl_mean"], want, se)


def test_experts_no_calibration_token_reached_are_named(zoo, tmp_path):
    """Four calibration tokens, two experts each: most of the 8 experts per layer get none."""
    args = ["--num-samples", "1", "--max-seq-length", "4", "--recipe", "gptq"]
    result = cli("quantize", "--model", str(zoo["qwen3-30b-a3b"]), *args, runs=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.strip().startswith("routing")]
    assert "got no routed calibration token (e.g. model.layers.0.mlp.experts:" in line
    manifest = json.loads((tmp_path / "qwen3-30b-a3b" / "gptq" / "manifest.json").read_text())
    unrouted = manifest["stages"]["quantize"]["metrics"]["routing"]["unrouted"]
    assert unrouted and all(0 < len(ids) < 8 for ids in unrouted.values())


# A sliding-window family through W4A16, and quantized MoE (served on AMX CPUs and GPUs)
SERVED = [("mistral-7b", "w4a16-rtn"), ("qwen3-30b-a3b", "gptq"), ("mixtral-8x7b", "fp8")]
SMALL_BENCH = ["--num-prompts", "4", "--concurrency", "1", "--input-len", "32", "--output-len", "8"]
SMALL_BENCH += ["--enforce-eager"]  # no torch.compile warm-up: this test 123 s → 81 s
SMALL_BENCH += ["--repeats", "1"]  # paired, both servers at once; one run each


@pytest.fixture(scope="module")
def small_gptq(tmp_path_factory) -> str:
    """gptq with the zoo's calibration budget (serve takes no calibration flags)."""
    text = (REPO / "recipes" / "gptq.yaml").read_text()
    text = text.replace("num_samples: 512", "num_samples: 16")
    path = tmp_path_factory.mktemp("small-gptq") / "gptq.yaml"
    path.write_text(text.replace("max_seq_length: 2048", "max_seq_length: 128"))
    return str(path)


@pytest.mark.parametrize("alias, name", SERVED)
def test_zoo_serves_where_the_host_can_else_refuses_before_anything(
    zoo, tmp_path, small_gptq, alias, name
):
    """vLLM 0.32's CPU MoE kernels (FP8, INT4, INT8) all need AMX: on other CPUs the probe
    refuses a quantized MoE up front (the engine would fail after serving the original)."""
    from pipeline.engines.vllm import serving_env

    if not serving_env.available():
        pytest.skip("serving env not built (make setup)")
    scheme = recipe.load(name).scheme()
    config = json.loads((zoo[alias] / "config.json").read_text())
    needed = serving_env.moe_kernel(scheme) if architecture.experts(config) else "w4a16"
    given = small_gptq if name == "gptq" else name
    args = ["--model", str(zoo[alias]), "--recipe", given, *SMALL_BENCH, "--json"]
    result = cli("serve", *args, runs=tmp_path)
    assert "Traceback" not in result.stderr
    caps = serving_env.capabilities()
    if caps[needed] is False:
        assert result.returncode == 4, result.stderr[-3000:]
        moe = f"{scheme.label} mixture-of-experts model (no {scheme.label} MoE kernel"
        # an AVX2 host has no W4A16 kernel at all: that refusal comes first
        dense = caps.get("w4a16") is False and "cannot serve W4A16" in result.stderr
        assert moe in result.stderr or dense, result.stderr[-3000:]
        assert not (tmp_path / alias / "original").exists()  # nothing was served
        return
    assert result.returncode == 0, result.stderr[-3000:]
    (sv,) = [s for s in json.loads(result.stdout)["stages"] if s["stage"] == "serve"]
    results = json.loads(open(sv["paths"]["results"]).read())
    for side, p in results["predicted"].items():  # the planner, from the config alone
        assert p["weights_bytes"] == pytest.approx(p["weights_measured"], rel=0.02), side
        assert p["kv_cache_tokens"] == pytest.approx(p["kv_cache_tokens_measured"], rel=0.02)
    assert all(lv["failed"] == 0 for lv in results["quantized"]["levels"])


def test_shrunk_configs_keep_what_the_family_does_differently():
    assert shrunk_config("mistral-7b")["sliding_window"] == 128
    assert shrunk_config("llama3.1-8b")["rope_scaling"]["rope_type"] == "llama3"
    assert shrunk_config("qwen2.5-7b")["tie_word_embeddings"] is True
    assert shrunk_config("mixtral-8x7b")["num_local_experts"] == 8
    assert shrunk_config("qwen3-30b-a3b")["num_experts"] == 8
    mla = shrunk_config("deepseek-v2-lite")
    assert mla["kv_lora_rank"] == 512 and mla["n_routed_experts"] == 8
    assert mla["num_key_value_heads"] == mla["num_attention_heads"]


def test_an_artifact_that_cannot_run_is_never_done(zoo, tmp_path):
    """MLA with grouped KV heads (a config transformers' DeepSeek code cannot run): FP8 needs
    no forward pass to quantize, so only the reload check finds it: one line, exit 1."""
    import shutil

    bad = tmp_path / "bad-mla"
    shutil.copytree(zoo["deepseek-v2-lite"], bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 2}))
    result = cli("quantize", "--model", str(bad), "--recipe", "fp8", runs=tmp_path / "runs")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert "artifact check:" in line and "forward pass fails" in line
    manifest = json.loads((tmp_path / "runs" / "bad-mla" / "fp8" / "manifest.json").read_text())
    assert manifest["stages"]["quantize"]["status"] == "failed"
    assert not (tmp_path / "runs" / "bad-mla" / "fp8" / "artifact").exists()
