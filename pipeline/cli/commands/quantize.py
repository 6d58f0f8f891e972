"""`pipeline quantize`: a recipe's artifact (or with `--import` a checkpoint quantized elsewhere);
`--dry-run` prints its plan and whether this host fits it.

The quantize plan's renderer is imported inside `handle`, like the stages: the parser imports
every command's module and should load none of them."""

import argparse
import json

from pipeline.cli import common_flags
from pipeline.cli.artifact_stage import quantize_stage
from pipeline.cli.chain import refuse_what_this_host_cannot, run_flow
from pipeline.cli.requests import ChainRequest
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free)

NAME = "quantize"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model_args(p, "--import")
    p.add_argument("--num-samples", type=int, help="override the recipe's calibration samples")
    p.add_argument("--max-seq-length", type=int, help="override the recipe's sequence length")
    p.add_argument("--force", action="store_true", help="redo even if the cached result is valid")
    common_flags.nproc(p)
    common_flags.path_args(p)
    common_flags.dry_run(p, help="print the plan; load no weights")
    common_flags.json_flag(p, help="the outcome (with --dry-run: the plan)")


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    req = ChainRequest.from_args(args, (), force={NAME} if args.force else ())
    q = quantize_stage(req.artifact, runs)
    if req.dry_run:
        from pipeline.chain import plan as chain_plan

        plan, text = q.describe_plan()  # an import's: its detected format, what was checked
        # disk (the download, the artifact) and time, as the chain plans them
        chain = chain_plan.build(q, ())
        made = chain.stages["quantize"]
        plan |= {"disk": chain.disk, "refusals": chain.refusals}
        plan |= {"time": made.time, "files": made.files}
        text += "\n" + chain_plan.disk_and_time_lines(plan)
        print(json.dumps(plan, indent=2) if req.as_json else text)
        chain_plan.refused(plan["refusals"])
        return Outcome.of(NAME, "ok", model=q.ref.name, recipe=q.recipe.name)
    refuse_what_this_host_cannot(req, q)  # short disk or memory: before any download
    return run_flow(req, q)
