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
