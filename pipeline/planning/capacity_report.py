"""`make plan`'s report: the capacity table (capacity.py) for a model, the recipes and a GPU, as
the terminal table or as JSON. Imports no torch: `make plan` answers in about a second.

    capacity_report.report("llama3-70b", ["fp8"], "H100-80GB", ["auto", "fp8"], PlanSettings())
"""

import json

from pipeline.config import recipe
from pipeline.config.capacity_settings import PlanSettings
from pipeline.models import aliases
from pipeline.planning import capacity, geometry
from pipeline.planning.deployment import Budget
from pipeline.planning.gpus import named


def report(
    model: str,
    recipe_names: list[str] | None,
    gpu: str,
    kv_dtypes: list[str] | None,
    settings: PlanSettings,
    as_json: bool = False,
) -> tuple[str, str]:
    """(the model's resolved name, the report); recipe_names None: every shipped recipe;
    kv_dtypes None: both a 16-bit and an FP8 cache."""
    ref = aliases.resolve(model)
    g = geometry.of_model(ref)
    recipes = [recipe.load(name) for name in (recipe_names or recipe.shipped())]
    gpus = named(gpu, settings.gpus_per_node)
    flat = settings.overhead_gib
    budget = Budget(
        settings.gpu_memory_utilization,
        None if flat is None else int(flat * 2**30),
        settings.max_num_batched_tokens,
    )
    users, context = settings.users, settings.context
    rows = capacity.plan(g, recipes, kv_dtypes or ["auto", "fp8"], users, context, gpus, budget)
    if as_json:
        table = {"model": ref.name, "gpu": gpu, "gpu_bytes": gpus.memory_bytes}
        table["kv_layout"] = g.kv_modelled
        return ref.name, json.dumps({**table, "rows": capacity.as_json(rows)}, indent=2)
    head = capacity.describe(ref.name, g, gpus, budget, context)
    return ref.name, head + "\n" + capacity.render(rows, users, context, gpus)
