"""The Artifact protocol: what eval, serve, publish and the chain need of the stage that made an
artifact. Two stages make one, and each implements every member itself (neither inherits from
the other): a recipe's quantize stage (pipeline/quantize/stage.py) and the import of a checkpoint
quantized elsewhere (pipeline/external/stage.py).

    q = quantize_stage(request, runs)           # either one (cli/artifact_stage.py)
    EvalStage.prepare(q, backend="hf")          # eval, serve and publish take an Artifact
    if why := q.host_fit(q.max_memory): ...     # the chain asks; an import says None
"""

from pathlib import Path
from typing import Protocol

from pipeline.config.recipe import Calibration, RecipeFile
from pipeline.core.rundir import StageEntry
from pipeline.core.stage import Stage
from pipeline.core.stage_plan import ArtifactPlan
from pipeline.models.aliases import ModelRef
from pipeline.planning.geometry import Geometry


class Artifact(Stage, Protocol):
    """A Stage (its inputs, work, outputs, results, staging) that leaves an artifact in its run
    dir, with the model and recipe the later stages build on."""

    # from Stage: name ("quantize" for both: the key later stages look up), folder, rundir,
    # header (model and recipe), inputs, before_work, work, outputs, load_results, staging
    # read, never set, by the later stages: a field or a property
    @property
    def ref(self) -> ModelRef: ...  # the base model (an import's too: the reference's)

    @property
    def geometry(self) -> Geometry: ...

    @property
    def recipe(self) -> RecipeFile: ...  # an import's: its format described as a recipe

    @property
    def calibration(self) -> Calibration: ...

    @property
    def model_path(self) -> Path | None: ...  # the base model's files, once loaded

    @property
    def model_identity(self) -> dict: ...

    @property
    def max_memory(self) -> int | None: ...  # --max-memory (None: the host's; an import's too)

    @property
    def artifact(self) -> Path: ...  # what vLLM loads and publish uploads

    def artifact_for(self, backend: str) -> Path: ...  # what an eval backend loads

    @property
    def hf_refusal(self) -> str | None: ...  # why the hf eval backend cannot run it (None: can)

    @property
    def log(self) -> Path: ...  # where the libraries' messages go

    def host_fit(self, max_memory: int | None) -> str | None:
        """Why making it does not fit `max_memory` (None: the host's available memory); None
        when it fits, or when nothing was checked (an import quantizes nothing)."""

    def load_inputs(self) -> None: ...  # materialize the model(s): no run dir yet

    def entry(self) -> StageEntry: ...  # the finished entry later stages build on

    def plan(self) -> dict: ...  # what --dry-run prints, decided from configs alone

    def describe_plan(self) -> tuple[dict, str]: ...  # that plan with its host fit, and as text

    def stage_plan(self) -> ArtifactPlan: ...  # the chain's view: where, memory, files, time
