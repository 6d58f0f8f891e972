"""`pipeline advise` (`make advise`): which recipe to deploy, on how many GPUs, at what cost and
quality loss.

The advisor is imported inside `handle`: it loads the planning and perf code, which the parser
(it imports every command's module) should not."""

import argparse

from pipeline.cli import common_flags
from pipeline.config import flags
from pipeline.config.advise_settings import AdviseSettings
from pipeline.config.strict import validated
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs
from pipeline.planning.gpus import SPECS as GPUS

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free)

NAME = "advise"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model(p)
    common_flags.recipes(p)
    p.add_argument("--gpu", default="H100-80GB", help=f"{', '.join(GPUS)}, or host (this CPU)")
    flags.add(p, AdviseSettings, default_label="default")
    common_flags.json_flag(p, help=None)


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.advise import report as advise_report

    s = validated(AdviseSettings, flags.overrides(vars(args), AdviseSettings), "advise settings")
    name, text = advise_report.report(args.model, args.recipe, args.gpu, s, args.json, runs)
    print(text)
    return Outcome.of(NAME, "ok", model=name)
