"""`pipeline search`: a mixed-precision recipe at a target bits per weight, from measured
sensitivities; the recipe it writes is then a recipe like any other.

The search stage is imported inside `handle`: it loads the stages, which the parser (it imports
every command's module) should not."""

import argparse
from pathlib import Path

from pipeline.cli import common_flags
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.models import aliases

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free)

NAME = "search"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model(p)
    common_flags.revision(p)
    p.add_argument(
        "--target-bits", type=float, required=True, help="average bits per weight, scales included"
    )
    p.add_argument(
        "--tokens", type=int, default=8192, help="calibration tokens each group is scored on"
    )
    common_flags.backend(p, "eval backend of every recipe")
    p.add_argument("--force", action="store_true", help="re-measure the sensitivities")
    common_flags.json_flag(p)


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.search import compare
    from pipeline.search.stage import SearchStage

    ref = aliases.resolve(args.model, args.revision)
    stage = SearchStage.prepare(ref, args.target_bits, args.tokens, runs)
    summary = compare.run(stage, args.backend or "hf", args.force)
    paths = {"search": str(stage.rundir.path / "search.json"), "recipe": summary["recipe"]}
    recipe = Path(summary["recipe"]).stem
    return Outcome.of(NAME, "ok", model=stage.ref.name, recipe=recipe, paths=paths)
