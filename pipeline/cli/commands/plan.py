"""`pipeline plan` (`make plan`): GPUs and users per recipe × KV-cache dtype, from the model's
config alone; no torch.

Deferred imports: the planner: it loads the planning code, which the parser (it
imports every command's module) should not."""

import argparse

from pipeline.cli import common_flags
from pipeline.config import flags
from pipeline.config.capacity_settings import PlanSettings
from pipeline.config.strict import validated
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.planning.gpus import SPECS as GPUS

NAME = "plan"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model(p)
    common_flags.recipes(p)
    p.add_argument("--kv-dtype", action="append", help="auto (16-bit) and/or fp8; default both")
    p.add_argument("--gpu", default="H100-80GB", help=f"{', '.join(GPUS)}, or a size like 24GiB")
    flags.add(p, PlanSettings, default_label="default")
    common_flags.json_flag(p, help=None)


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.planning import capacity_report

    settings = validated(PlanSettings, flags.overrides(vars(args), PlanSettings), "plan settings")
    name, text = capacity_report.report(
        args.model, args.recipe, args.gpu, args.kv_dtype, settings, args.json
    )
    print(text)
    return Outcome.of(NAME, "ok", model=name)
