"""`pipeline run`: quantize → eval → serve, each reused when cached; one summary table at the
end. What this host cannot do is refused before the first stage (unless --skip-unsupported).

Deferred imports: flow and show: they load the stages, which the parser (it
imports every command's module) should not."""

import argparse
import json
import sys
from pathlib import Path

from pipeline.chain.request import ChainSpec
from pipeline.cli import common_flags
from pipeline.cli.artifact_stage import quantize_stage
from pipeline.cli.chain import dry_run, refuse_what_this_host_cannot, run_flow
from pipeline.cli.requests import ChainRequest, from_spec
from pipeline.config.strict import validated
from pipeline.core.errors import UserError
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs

NAME = "run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common_flags.model_args(p)
    common_flags.backend(p, "eval backend")
    p.add_argument("--stages", default="eval,serve", help="after quantize (default eval,serve)")
    common_flags.nproc(p)
    p.add_argument(
        "--force",
        nargs="?",
        const="all",
        metavar="STAGE",
        help="redo every stage even if cached; --force STAGE: only that one (quantize, eval, "
        "serve)",
    )
    common_flags.path_args(p)
    p.add_argument(
        "--skip-unsupported", action="store_true", help="record stages this host cannot run"
    )
    common_flags.serving(p)
    common_flags.dry_run(p)
    common_flags.json_flag(p)
    p.add_argument(
        "--request",
        metavar="FILE",
        help="the chain as a JSON request instead of flags (pipeline/chain/request.py; - : "
        "stdin): what a nightly cell hands its run",
    )


def handle(args: argparse.Namespace, runs: Runs) -> Outcome:
    if args.request is not None:
        req = from_spec(_spec(args.request), as_json=args.json)
        _stages(",".join(req.stages))
    else:
        stages = _stages(args.stages)
        force = forced(args.force, stages)  # a bad stage name: one line before anything loads
        req = ChainRequest.from_args(args, stages, force)
    q = quantize_stage(req.artifact, runs)
    if req.dry_run:
        return dry_run(req, q)
    if not req.options.skip_unsupported:
        refuse_what_this_host_cannot(req, q)
    outcome = run_flow(req, q)
    _print_table(outcome)
    return outcome


def _spec(source: str) -> ChainSpec:
    """The JSON request in `source` (a file, or - for stdin), checked field by field."""
    text = sys.stdin.read() if source == "-" else _read(source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"--request {source}: not JSON ({e})") from None
    return validated(ChainSpec, data, f"--request {source}")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise UserError(f"--request {path}: {e.strerror}") from None


def _stages(text: str) -> tuple[str, ...]:
    from pipeline.chain import flow

    stages = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in stages if s not in flow.STAGES]
    if unknown:  # quantize always runs first: the stages after it are the ones to name
        valid = ", ".join(flow.STAGES[1:])
        raise UserError(f"--stages: unknown stage {unknown[0]!r} (valid: {valid})")
    return stages


def forced(force: str | None, stages: tuple[str, ...]) -> set[str]:
    """`run --force` redoes every stage of the run; `--force STAGE` that one."""
    every = {"quantize", *stages}
    if force is None:
        return set()
    if force == "all":
        return every
    if force not in every:
        raise UserError(
            f"--force {force}: not a stage of this run (valid: {', '.join(sorted(every))})"
        )
    return {force}


def _print_table(outcome: Outcome) -> None:
    from pipeline.cli import show

    text = show.run_summary(outcome)
    if text:
        print()
        print(text)
