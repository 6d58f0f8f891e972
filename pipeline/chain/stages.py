"""The stages after the artifact's, in the order they run: how each is prepared from the
artifact and the command's options, and its plan. Adding a stage: its own package (stage.py,
plan.py, results.py) and one line here."""

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.artifact import Artifact
from pipeline.core.stage import Stage
from pipeline.core.stage_plan import Options, StagePlan, Upstream
from pipeline.eval import plan as eval_plan
from pipeline.eval.stage import EvalStage
from pipeline.serve import plan as serve_plan
from pipeline.serve.stage import ServeStage


@dataclass(frozen=True)
class Later:
    prepare: Callable[[Artifact, Options], Stage]  # every check, nothing written
    plan: Callable[[Artifact, Options, Upstream], StagePlan]  # from the config alone


LATER: dict[str, Later] = {
    "eval": Later(lambda a, o: EvalStage.prepare(a, o.backend), eval_plan.plan),
    "serve": Later(lambda a, o: ServeStage.prepare(a, o.serve_overrides, o.port), serve_plan.plan),
}
