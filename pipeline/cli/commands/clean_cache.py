"""`pipeline clean-cache`: prune older eval / serve results of every run folder (core/prune.py),
then what object storage holds of them (Runs.commit_pruned)."""

import argparse

from pipeline.core import prune
from pipeline.core.errors import UserError
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

NAME = "clean-cache"
MIB = 2**20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep", type=int, default=1, help="results kept per stage (the latest first)")
    p.add_argument("--max-mib", type=float, help="and at most this much per stage and run dir")


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    if args.keep < 1:
        raise UserError(f"--keep must be >= 1: the latest result is always kept (got {args.keep})")
    if args.max_mib is not None and not 0 <= args.max_mib < float("inf"):
        raise UserError(f"--max-mib must be a size ≥ 0 (got {args.max_mib})")
    cap = int(args.max_mib * MIB) if args.max_mib is not None else None
    removed = prune.run_dirs(runs, args.keep, cap)
    for path in removed:
        print(f"removed   {path}")
    for line in runs.commit_pruned():  # the store pruned too: commits, then its GC
        print(line)
    print(f"clean-cache: {len(removed)} older results removed under {runs.local}")
    return Outcome.of(NAME, "ok")
