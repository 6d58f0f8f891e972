"""How a recipe's quantize runs, decided from its request before anything loads (policy.py):
tiny-llama's caps under the command line's values, AutoRound's pack default and iteration cap,
the path a recipe takes by default, and each refusal in one line."""

import pytest

from pipeline.config import recipe
from pipeline.core.errors import UserError
from pipeline.models import aliases
from pipeline.planning import geometry
from pipeline.quantize import policy
from pipeline.quantize.request import QuantizeRequest

TINY = aliases.resolve("tiny-llama")
LLAMA = aliases.resolve("llama3-8b")


def test_tiny_llama_s_calibration_is_capped_unless_the_command_line_says():
    capped = policy.calibration(QuantizeRequest(TINY, recipe.load("gptq")))
    assert (capped.num_samples, capped.max_seq_length) == (64, 256)  # from 512 × 2048
    given = policy.calibration(QuantizeRequest(TINY, recipe.load("gptq"), num_samples=8))
    assert (given.num_samples, given.max_seq_length) == (8, 256)
    full = policy.calibration(QuantizeRequest(LLAMA, recipe.load("gptq")))
    assert (full.num_samples, full.max_seq_length) == (512, 2048)  # no cap beyond tiny-llama


def test_autoround_packs_its_samples_and_is_capped_on_tiny_llama_only():
    autoround, gptq = recipe.load("autoround"), recipe.load("gptq")
    assert policy.calibration(QuantizeRequest(TINY, autoround)).pack is True
    assert policy.calibration(QuantizeRequest(TINY, gptq)).pack is False
    assert policy.capped(QuantizeRequest(TINY, autoround)) == {
        "AutoRoundModifier": {"iters": policy.TINY_AUTOROUND_ITERS}
    }
    assert policy.capped(QuantizeRequest(LLAMA, autoround)) == {}
    assert policy.capped(QuantizeRequest(TINY, gptq)) == {}


def test_a_data_free_recipe_takes_the_model_free_path_and_a_calibrating_one_oneshot():
    g = geometry.of_model(TINY)
    assert policy.choose_path(None, recipe.load("fp8"), 1, g) == "model-free"
    assert policy.choose_path(None, recipe.load("gptq"), 1, g) == "oneshot"
    with pytest.raises(UserError, match="--path model-free: recipe gptq cannot take it"):
        policy.choose_path("model-free", recipe.load("gptq"), 1, g)
    with pytest.raises(UserError, match="--workers 2: applies to the model-free path"):
        policy.choose_path("oneshot", recipe.load("fp8"), 2, g)


def test_a_calibrating_recipe_without_samples_or_with_more_processes_is_refused():
    with pytest.raises(UserError, match="recipe gptq needs calibration data"):
        policy.calibration(QuantizeRequest(TINY, recipe.load("gptq"), num_samples=0))
    cal = policy.calibration(QuantizeRequest(TINY, recipe.load("gptq"), num_samples=2))
    with pytest.raises(UserError, match="--nproc 0: at least 1"):
        policy.check_nproc(0, recipe.load("gptq"), cal)
    fp8 = recipe.load("fp8")
    with pytest.raises(UserError, match="recipe fp8 calibrates nothing"):
        policy.check_nproc(2, fp8, policy.calibration(QuantizeRequest(TINY, fp8)))


def test_without_nproc_a_calibration_splits_over_the_visible_gpus_where_shm_holds_the_model(
    monkeypatch,
):
    gptq, fp8 = recipe.load("gptq"), recipe.load("fp8")
    g = geometry.of_model(LLAMA)
    cal = policy.calibration(QuantizeRequest(LLAMA, gptq))
    eight = [f"H100 {i}" for i in range(8)]
    monkeypatch.setattr(policy.environment, "gpus", lambda: eight)
    monkeypatch.setattr(policy.shm, "free_bytes", lambda path=None: 1 << 40)
    n, why = policy.processes(gptq, cal, "oneshot", g)
    assert n == 8 and why == "8 processes, one per visible GPU: each calibrates 1/8 of the samples"
    assert policy.decide(QuantizeRequest(LLAMA, gptq), g).nproc == 8
    assert policy.decide(QuantizeRequest(LLAMA, gptq, nproc=1), g).nproc == 1  # asked: kept
    few = policy.calibration(QuantizeRequest(LLAMA, gptq, num_samples=3))
    assert policy.processes(gptq, few, "oneshot", g)[0] == 3  # a rank needs a sample
    fp8_cal = policy.calibration(QuantizeRequest(LLAMA, fp8))
    assert policy.processes(fp8, fp8_cal, "model-free", g) == (1, None)  # nothing to split

    # a container's 64 MiB /dev/shm cannot hold the shared offload: one process, and why
    monkeypatch.setattr(policy.shm, "free_bytes", lambda path=None: 64 << 20)
    n, why = policy.processes(gptq, cal, "oneshot", g)
    assert n == 1 and why.startswith("1 process, not 8: 8 processes (compressed-tensors' "), why
    assert why.endswith("--ipc=host or --shm-size=15g"), why

    for gpus in ([], eight[:1]):  # a CPU's processes would split its cores: asked, not chosen
        monkeypatch.setattr(policy.environment, "gpus", lambda gpus=gpus: gpus)
        assert policy.processes(gptq, cal, "oneshot", g) == (1, None)
