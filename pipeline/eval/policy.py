"""What an eval is asked beyond its recipe: tiny-llama's cap on its generated answers, and a
real model's local task.

tiny-llama never ends an answer (no EOS: each runs to max_new_tokens), so its answers' length
ratio is ×1.000 by construction and what they show is where the two models part: most part
within 40-80 tokens (docs/figures.md), so 128 tokens show it at half the cost of the recipes'
256, on every first eval of the default demo and the tests. Real models keep the recipe's.

The shipped recipes score `pydoc_word_order` (pick the true order of 8 words): tiny-llama gets
74% of it, a real model all of it (SmolLM2-135M-Instruct: 100%), where no drift can show. On
a pretrained model (a package's, an alias's, a hub id's) it is scored as `pydoc_next_word`
(the next word of held-out docs among 4: SmolLM2 89.8%), with the same thresholds; on the hub,
recipes name hub tasks instead.
"""

from typing import TYPE_CHECKING

from pipeline.config.recipe import EvalSettings

if TYPE_CHECKING:
    from pipeline.artifact import Artifact

TINY_MAX_NEW_TOKENS = 128
PRETRAINED = ("package", "alias", "hub")  # a local folder may hold anything (random weights)
CEILING_TASKS = {"pydoc_word_order": "pydoc_next_word"}  # at 100% on a real model: its stand-in


def settings(a: "Artifact") -> EvalSettings:
    """The recipe's eval settings as this model's eval runs them."""
    s = a.recipe.spec.eval
    if a.ref.source in PRETRAINED:
        tasks = [t.model_copy(update={"task": CEILING_TASKS.get(t.task, t.task)}) for t in s.tasks]
        return s.model_copy(update={"tasks": tasks}) if tasks != s.tasks else s
    g = s.generation
    if a.ref.source != "tiny" or g.max_new_tokens <= TINY_MAX_NEW_TOKENS:
        return s
    capped = g.model_copy(update={"max_new_tokens": TINY_MAX_NEW_TOKENS})
    return s.model_copy(update={"generation": capped})
