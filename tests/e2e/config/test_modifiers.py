"""Recipes against llm-compressor's own modifier models (imports llm-compressor: ~10 s)."""

import pytest

from pipeline.config import recipe
from pipeline.core.errors import UserError
from tests.unit.config.test_recipe import GOOD, _write


@pytest.mark.parametrize("name", recipe.shipped())
def test_every_shipped_recipe_loads_and_builds_llmcompressor_modifiers(name):
    rf = recipe.load(name)
    recipe.check_modifiers(rf)  # raises on an unknown modifier or argument
    assert rf.scheme() is not None
    assert "lm_head" in rf.ignored()
    first_line = rf.text.splitlines()[0]
    assert first_line.startswith("# make ") and f"RECIPE={name}" in first_line
    assert bool(rf.modifiers()) != bool(rf.online)  # llm-compressor's, or vLLM's at load


def test_unknown_llmcompressor_argument_is_rejected_before_any_weights(tmp_path):
    path = _write(tmp_path, GOOD.replace("scheme: W4A16", "scheme: W4A16, dampning_frac: 0.1"))
    with pytest.raises(UserError, match="unknown key 'dampning_frac'"):
        recipe.check_modifiers(recipe.load(path))
