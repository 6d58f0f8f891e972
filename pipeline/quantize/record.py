"""What the two stages that make an artifact record alike: a recipe's quantize stage
(quantize/stage.py) and an import (external/stage.py) — the manifest header, the finished entry
later stages build on, and its metrics as the stage's results."""

from typing import TYPE_CHECKING

from pipeline.core.errors import UserError
from pipeline.core.rundir import StageEntry
from pipeline.models import aliases

if TYPE_CHECKING:
    from pipeline.artifact import Artifact


def header(stage: "Artifact") -> dict:
    """The model and recipe, as every stage of the run dir records them."""
    rf = stage.recipe
    return {
        "model": aliases.header(stage.ref, stage.model_identity),
        "recipe": {"name": rf.name, "path": str(rf.path), "sha256": rf.sha256},
    }


def finished_entry(stage: "Artifact") -> StageEntry:
    """The stage's entry if it finished: eval, serve and publish refuse without one."""
    entry = stage.rundir.stage(stage.name)
    if entry is None or entry.status != "done":
        raise UserError(f"no finished artifact for {stage.ref.name} × {stage.recipe.name}")
    return entry


def results(entry: StageEntry) -> dict:
    """An artifact's results are its entry's metrics (sizes, reload check, layouts)."""
    return entry.metrics
