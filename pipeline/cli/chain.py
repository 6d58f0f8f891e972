"""After the artifact's stage: eval, serve and run either print the chain's plan (`--dry-run`)
or run the flow, and `run` refuses up front what this host cannot do; each takes the command's
ChainRequest (cli/requests.py).

Deferred imports: the chain's plan, flow and show: they reach the stages (~0.3 s and
more), which every command would pay at start, since the parser imports every command's module."""

import json

from pipeline.cli.artifact_stage import quantize_stage
from pipeline.cli.requests import ChainRequest
from pipeline.core.errors import NotOnThisHost
from pipeline.core.outcome import Outcome
from pipeline.core.runs import Runs


def dry_run(req: ChainRequest, q) -> Outcome:
    """`--dry-run` on eval / serve / run: the plan; exit 4 when this host cannot do it."""
    from pipeline.chain import plan as chain_plan

    plan = chain_plan.build(q, req.stages, req.options)
    print(json.dumps(plan.record(), indent=2) if req.as_json else chain_plan.render(plan))
    chain_plan.refused(plan.refusals)
    return Outcome.of(req.command, "ok", model=q.ref.name, recipe=q.recipe.name)


def refuse_what_this_host_cannot(req: ChainRequest, q) -> None:
    """Not hours in: the plan's first refusal, before any stage runs."""
    from pipeline.chain import plan as chain_plan

    plan = chain_plan.build(q, req.stages, req.options)
    if refusals := plan.refusals:
        raise NotOnThisHost(f"{refusals[0]} (--dry-run shows the whole plan)")


def run_flow(req: ChainRequest, q) -> Outcome:
    from pipeline.chain import flow
    from pipeline.cli import show

    prepared = flow.prepare(req.command, q, req.stages, req.options)
    return flow.run(prepared, show.STAGES, set(req.force))


def one_stage(req: ChainRequest, runs: Runs) -> Outcome:
    """`eval` or `serve` alone: after the artifact's stage (cached or run), its dry-run plan or
    the flow; --force redoes that stage only."""
    q = quantize_stage(req.artifact, runs)
    if req.dry_run:
        return dry_run(req, q)
    return run_flow(req, q)
