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
    p.add_argument(
        "--calib",
        help="compare calibration sets for one recipe: comma-separated python-docs, "
        "python-docs-chat, files (.txt, .jsonl with text or messages, .parquet) or hub ids "
        "(org/name[:split]); a table with a verdict for each pair",
    )
    p.add_argument("--samples", help="with --calib: calibration sample counts, e.g. 64,256")
    p.add_argument("--seeds", help="with --calib: sampling seeds, e.g. 42,43 (two draws)")
    p.add_argument(
        "--eval-data",
        help="with --calib: held-out text every cell is scored on (python-docs, a file, or "
        "org/name[:split]); default the recipe's",
    )
    common_flags.revision(p)
    common_flags.backend(p, "eval backend of every recipe")
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
    if args.calib or args.samples or args.seeds or args.eval_data:
        return _calibration_sets(args, names, runs)
    asks = [QuantizeRequest.named(args.model, name, args.revision) for name in names]
    stages = compare_recipes.prepare(asks, runs)
    if args.dry_run:
        compare_recipes.plan(stages, args.backend, args.serve, args.json)
        return Outcome.of(NAME, "ok", model=stages[0].ref.name)
    return compare_recipes.compare(stages, args.backend, args.serve)


def _calibration_sets(args: argparse.Namespace, names: list[str], runs: Runs) -> Outcome:
    from pipeline.core.errors import UserError
    from pipeline.search import calibration_sets, compare_calibration, compare_recipes

    if len(names) != 1:
        raise UserError(f"--calib compares calibration sets for one recipe; got {len(names)} "
                        f"({', '.join(names)}): name one with --recipes")  # fmt: skip
    if args.serve:
        raise UserError("--calib: --serve measures nothing calibration changes (the format "
                        "decides throughput); leave it out")  # fmt: skip
    ask = QuantizeRequest.named(args.model, names[0], args.revision)
    sets = calibration_sets.parse(ask.recipe, args.calib, args.samples, args.seeds)
    if args.eval_data:
        from pipeline.data.texts import check_source

        dataset, _, split = args.eval_data.partition(":")
        spec = ask.recipe.spec.eval
        check_source(dataset, split or spec.split, spec.text_column, "--eval-data")
    folder, stages = compare_calibration.prepare(ask, sets, args.eval_data, runs)
    if args.dry_run:
        compare_recipes.plan(stages, args.backend, False, args.json)
        return Outcome.of(NAME, "ok", model=stages[0].ref.name)
    return compare_calibration.compare(folder, stages, args.backend)
