"""The dry run shows what the run will do: for every shipped recipe, the chain's plan on this
host names the quantize path, the eval backend and the serve launches its prepared stages hold
(both ask the same functions: the quantize policy, eval/backend_choice.py, serve/plan.planned),
and lists as refused any stage whose preparation this host refuses."""

from pathlib import Path

import pytest

from pipeline.chain import plan as chain_plan
from pipeline.chain.stages import LATER
from pipeline.core.errors import NotOnThisHost
from pipeline.core.runs import Runs
from pipeline.core.stage_plan import NO_OPTIONS
from pipeline.quantize.request import QuantizeRequest
from pipeline.quantize.stage import QuantizeStage
from pipeline.serve.plan import launches

RECIPES = sorted(p.stem for p in Path("recipes").glob("*.yaml"))


@pytest.mark.parametrize("name", RECIPES)
def test_the_dry_run_names_what_the_run_does(name, tmp_path, monkeypatch):
    monkeypatch.setattr(chain_plan, "free_bytes", lambda path: 10 * 2**40)  # disk aside
    q = QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", name), Runs(tmp_path))
    plan = chain_plan.build(q, ("eval", "serve"))
    assert plan.stages["quantize"].path == q.path
    for stage in ("eval", "serve"):
        try:
            prepared = LATER[stage].prepare(q, NO_OPTIONS)
        except NotOnThisHost as e:
            assert str(e) in plan.refusals, f"{stage} is refused by the run, not by the plan"
            continue
        planned = plan.stages[stage]
        if stage == "eval":
            assert (planned.backend, planned.backend_reason) == (
                prepared.backend,
                prepared.backend_reason,
            )
        else:
            started = launches(q, prepared.settings, prepared.placement)
            assert {side: launch["argv"] for side, launch in planned.launches.items()} == {
                side: launch.argv for side, launch in started.items()
            }
