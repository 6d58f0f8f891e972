"""What an eval is asked beyond its recipe: tiny-llama's cap on its generated answers.

tiny-llama never ends an answer (no EOS: each runs to max_new_tokens), so its answers' length
ratio is ×1.000 by construction and what they show is where the two models part: most part
within 40-80 tokens (docs/figures.md), so 128 tokens show it at half the cost of the recipes'
256, on every first eval of the default demo and the tests. Real models keep the recipe's.
"""

from typing import TYPE_CHECKING

from pipeline.config.recipe import EvalSettings

if TYPE_CHECKING:
    from pipeline.artifact import Artifact

TINY_MAX_NEW_TOKENS = 128


def settings(a: "Artifact") -> EvalSettings:
    """The recipe's eval settings as this model's eval runs them."""
    s = a.recipe.spec.eval
    g = s.generation
    if a.ref.source != "tiny" or g.max_new_tokens <= TINY_MAX_NEW_TOKENS:
        return s
    capped = g.model_copy(update={"max_new_tokens": TINY_MAX_NEW_TOKENS})
    return s.model_copy(update={"generation": capped})
