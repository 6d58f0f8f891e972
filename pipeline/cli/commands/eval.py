"""`pipeline eval`: the artifact against its base (perplexity, KL, top-token agreement)."""

import argparse

from pipeline.cli import common_flags
from pipeline.cli.chain import one_stage
from pipeline.cli.requests import ChainRequest
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

NAME = "eval"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model_args(p)
    common_flags.backend(p, "default: the recipe's eval.backend")
    p.add_argument("--force", action="store_true", help="redo the evaluation even if cached")
    common_flags.json_flag(p)
    common_flags.dry_run(p)


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    req = ChainRequest.from_args(args, (NAME,), force={NAME} if args.force else ())
    return one_stage(req, runs)
