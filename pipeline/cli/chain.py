"""After the artifact's stage: eval, serve and run either print the chain's plan (`--dry-run`)
or run the flow, and `run` refuses up front what this host cannot do.

chain_plan, flow and show are imported inside the functions: they reach the stages (~0.3 s and
more), which every command would pay at start, since the parser imports every command's module."""

import argparse
import json

from pipeline.cli.artifact_stage import quantize_stage
from pipeline.config import flags
from pipeline.config.recipe import ServeSettings
from pipeline.core.errors import NotOnThisHost
from pipeline.core.outcome import Outcome


def dry_run(args: argparse.Namespace, q, stages: tuple[str, ...], command: str) -> Outcome:
    """`--dry-run` on eval / serve / run: the plan; exit 4 when this host cannot do it."""
    from pipeline.chain import plan as chain_plan

    backend, serve = getattr(args, "backend", None), serve_overrides(args, stages)
    plan = chain_plan.build(q, stages, backend, serve)
    print(json.dumps(plan, indent=2) if args.json else chain_plan.render(plan))
    if plan["refusals"]:
        raise NotOnThisHost(plan["refusals"][0])
    return Outcome.of(command, "ok", model=q.ref.name, recipe=q.recipe.name)


def refuse_what_this_host_cannot(args: argparse.Namespace, q, stages: tuple[str, ...]) -> None:
    """Not hours in: the plan's first refusal, before any stage runs."""
    from pipeline.chain import plan as chain_plan

    backend = getattr(args, "backend", None)  # quantize alone has none
    plan = chain_plan.build(q, stages, backend, serve_overrides(args, stages))
    if refusals := plan["refusals"]:
        raise NotOnThisHost(f"{refusals[0]} (--dry-run shows the whole plan)")


def run_flow(args: argparse.Namespace, q, stages, backend=None, force=frozenset()) -> Outcome:
    from pipeline.chain import flow
    from pipeline.cli import show

    prepared = flow.prepare(
        args.command,
        q,
        stages,
        backend=backend,
        serve_overrides=serve_overrides(args, stages),
        port=getattr(args, "port", None),
        skip_unsupported=getattr(args, "skip_unsupported", False),
    )
    return flow.run(prepared, show.STAGES, set(force))


def serve_overrides(args: argparse.Namespace, stages: tuple[str, ...]) -> dict | None:
    """The serve settings the command line sets (--tensor-parallel-size, …)."""
    return flags.overrides(args, ServeSettings) if "serve" in stages else None


def one_stage(args: argparse.Namespace, stage: str, backend: str | None = None) -> Outcome:
    """`eval` or `serve` alone: after the artifact's stage (cached or run), its dry-run plan or
    the flow; --force redoes that stage only."""
    q = quantize_stage(args)
    if args.dry_run:
        return dry_run(args, q, (stage,), stage)
    return run_flow(args, q, (stage,), backend=backend, force={stage} if args.force else set())
