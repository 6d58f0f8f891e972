"""`pipeline recipes`: the shipped recipes, what each makes and where vLLM serves it."""

import argparse

from tabulate import tabulate

from pipeline.config import recipe
from pipeline.config.engine_name import ENGINE
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.engines import serving_env

NAME = "recipes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass  # no flags of its own


HEADERS = ("recipe", "scheme", "how", f"serves on ({ENGINE})", "GPU capability", "description")


def rows() -> list[tuple[str, ...]]:
    """One row per shipped recipe, HEADERS' cells (docs/reference/recipes.md shows the same)."""
    found: list[tuple[str, ...]] = []
    for name in recipe.shipped():
        rf = recipe.load(name)
        scheme = rf.scheme()
        how = "+".join(n.removesuffix("Modifier") for n, _ in rf.modifiers())
        how = how or f"{ENGINE} online {rf.online}"
        serves, capability = serving_env.serves_on(rf), serving_env.gpu_capability(scheme)
        found.append((name, scheme.name if scheme else "-", how, serves, capability,
                      rf.spec.description))  # fmt: skip
    return found


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    print(tabulate(rows(), HEADERS, tablefmt="plain", disable_numparse=True))
    return Outcome.of(NAME, "ok")
