"""`pipeline compare`: several recipes on one model, each quantized and evaluated through the
flow `run` uses (cached), then one table and one plot of drift against size and, where served,
throughput (pipeline/search/compare_recipes.py does the work).

The comparison is imported inside `handle`: it loads the stages, which the parser (it imports
every command's module) should not."""

import argparse

from pipeline.cli import common_flags
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.quantize.request import QuantizeRequest

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free)

NAME = "compare"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model(p)
    p.add_argument(
        "--recipes",
        help="comma-separated recipe names or .yaml paths (default fp8,w4a16-rtn,gptq)",
    )
    common_flags.revision(p)
    p.add_argument("--backend", choices=["hf", "vllm"], help="eval backend of every recipe")
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve each too (cached; what this host cannot serve is said); without it, serve "
        "results already cached are shown",
    )
    common_flags.dry_run(p, "print each recipe's chain plan; load nothing")
    common_flags.json_flag(p)


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.search import compare_recipes

    names = compare_recipes.parse_recipes(args.recipes)
    asks = [QuantizeRequest.named(args.model, name, args.revision) for name in names]
    stages = compare_recipes.prepare(asks, runs)
    if args.dry_run:
        compare_recipes.plan(stages, args.backend, args.serve, args.json)
        return Outcome.of(NAME, "ok", model=stages[0].ref.name)
    return compare_recipes.compare(stages, args.backend, args.serve)
