"""After the artifact's stage: eval, serve and run either print the chain's plan (`--dry-run`)
or run the flow, and `run` refuses up front what this host cannot do.

Deferred imports: the chain's plan, flow and show: they reach the stages (~0.3 s and
more), which every command would pay at start, since the parser imports every command's module."""

import argparse
import json

from pipeline.cli.artifact_stage import quantize_stage
from pipeline.config import flags
from pipeline.config.recipe import ServeSettings
from pipeline.core.errors import NotOnThisHost
from pipeline.core.outcome import Outcome
from pipeline.core.stage_plan import Options


def dry_run(args: argparse.Namespace, q, stages: tuple[str, ...], command: str) -> Outcome:
    """`--dry-run` on eval / serve / run: the plan; exit 4 when this host cannot do it."""
    from pipeline.chain import plan as chain_plan

    plan = chain_plan.build(q, stages, options(args, stages))
    print(json.dumps(plan.record(), indent=2) if args.json else chain_plan.render(plan))
    if plan.refusals:
        raise NotOnThisHost(plan.refusals[0])
    return Outcome.of(command, "ok", model=q.ref.name, recipe=q.recipe.name)


def refuse_what_this_host_cannot(args: argparse.Namespace, q, stages: tuple[str, ...]) -> None:
    """Not hours in: the plan's first refusal, before any stage runs."""
    from pipeline.chain import plan as chain_plan

    plan = chain_plan.build(q, stages, options(args, stages))
    if refusals := plan.refusals:
        raise NotOnThisHost(f"{refusals[0]} (--dry-run shows the whole plan)")


def run_flow(args: argparse.Namespace, q, stages, backend=None, force=frozenset()) -> Outcome:
    from pipeline.chain import flow
    from pipeline.cli import show

    prepared = flow.prepare(args.command, q, stages, options(args, stages, backend))
    return flow.run(prepared, show.STAGES, set(force))


def options(args: argparse.Namespace, stages: tuple[str, ...], backend=None) -> Options:
    """What the command line sets for the stages after the artifact's (quantize alone has no
    --backend, eval no --port: each command's parser has only its own flags)."""
    return Options(
        backend=backend or getattr(args, "backend", None),
        serve_overrides=flags.overrides(args, ServeSettings) if "serve" in stages else None,
        port=getattr(args, "port", None),
        skip_unsupported=getattr(args, "skip_unsupported", False),
    )


def one_stage(args: argparse.Namespace, stage: str, backend: str | None = None) -> Outcome:
    """`eval` or `serve` alone: after the artifact's stage (cached or run), its dry-run plan or
    the flow; --force redoes that stage only."""
    q = quantize_stage(args)
    if args.dry_run:
        return dry_run(args, q, (stage,), stage)
    return run_flow(args, q, (stage,), backend=backend, force={stage} if args.force else set())
