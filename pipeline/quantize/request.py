"""What a recipe's quantize is asked, typed once where the ask comes in (the command line's
`cli/requests.py`, a search, a comparison): the model resolved, the recipe loaded, the command
line's calibration overrides and how to run it. The stage decides the rest (policy.py).

    QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", "gptq", num_samples=16), runs)
"""

from dataclasses import dataclass

from pipeline.config import recipe
from pipeline.config.recipe import RecipeFile
from pipeline.models import aliases
from pipeline.models.aliases import ModelRef


@dataclass(frozen=True)
class QuantizeRequest:
    ref: ModelRef
    recipe: RecipeFile
    num_samples: int | None = None  # --num-samples: over the recipe's (and tiny-llama's cap)
    max_seq_length: int | None = None  # --max-seq-length, likewise
    nproc: int | None = None  # --nproc: processes under torchrun (None: the policy's choice)
    path: str | None = None  # --path; None: the recipe decides (policy.choose_path)
    workers: int = 1  # --workers: model-free shards quantized at once
    max_memory: int | None = None  # --max-memory; None: what the host has available

    @classmethod
    def named(
        cls, model: str, recipe_name: str, revision: str | None = None, **how
    ) -> "QuantizeRequest":
        """From names: the model resolved and the recipe loaded, each mistake one line (the
        model's first); `how`: the other fields."""
        ref = aliases.resolve(model, revision)
        return cls(ref, recipe.load(recipe_name), **how)
