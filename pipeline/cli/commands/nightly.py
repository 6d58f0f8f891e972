"""`pipeline nightly`: every cell of the nightly matrix, recorded in the store and compared with
the pinned baseline; `--pin-baseline` pins a run and exits.

The nightly package is imported inside `handle`: it loads the store and the executors, which the
parser (it imports every command's module) should not."""

import argparse

from pipeline.cli import common_flags
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free); the nightly's store loads
# SQLAlchemy

NAME = "nightly"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", help="matrix file (default evals/nightly.yaml)")
    p.add_argument("--executor", default="local", help="local | ray (RAY_ADDRESS, or a local Ray)")
    common_flags.db(p)
    p.add_argument("--new", action="store_true", help="start a new run, do not resume")
    p.add_argument("--pin-baseline", metavar="RUN_ID", help="pin a run (or 'latest') and exit")


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.nightly import night

    if args.pin_baseline:
        run_id, url = night.pin_baseline(args.matrix, args.db, args.pin_baseline)
        print(f"baseline pinned: {run_id} ({url})")
        return Outcome.of(NAME, "ok")
    status, message = night.nightly(args.matrix, args.executor, args.db, args.new, runs)
    return Outcome.of(NAME, status, message)
