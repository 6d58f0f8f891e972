"""`pipeline report`: the nightly's HTML and markdown report, judged by the matrix's thresholds.

The report module is imported inside `handle`: it loads the store and the plots, which the
parser (it imports every command's module) should not."""

import argparse
from pathlib import Path

from pipeline.cli import common_flags
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

# Deferred imports: the parser imports every command's module, so a command's stages load only when
# it runs (`--help`, `recipes` and `make plan` stay fast and torch-free); the report loads
# SQLAlchemy

NAME = "report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.db(p)
    p.add_argument("--out", default="reports", help="folder for <date>/index.html")
    p.add_argument(
        "--matrix", help="the nightly's matrix, for its thresholds (default evals/nightly.yaml)"
    )


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    from pipeline.nightly import report

    where = report.write(args.db, Path(args.out), args.matrix)
    print(f"report    {where / 'index.html'}")
    print(f"          {where / 'summary.md'}")
    return Outcome.of(NAME, "ok", paths={"html": str(where / "index.html")})
