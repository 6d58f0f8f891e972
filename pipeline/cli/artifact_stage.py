"""The stage that makes the artifact, prepared from its request (cli/requests.py): a recipe's
quantize stage, or with `--artifact` / `--import` the import of a checkpoint quantized
elsewhere; its run folder under `runs`.

Deferred imports: both stages: they pull in the model and planning code that `recipes`,
`plan` and `--help` never need."""

from pipeline.cli.requests import ArtifactRequest
from pipeline.core.runs import Runs
from pipeline.external.request import ImportRequest


def quantize_stage(req: ArtifactRequest, runs: Runs):
    """The prepared quantize (or import) stage."""
    if isinstance(req, ImportRequest):
        from pipeline.external.stage import ImportStage

        return ImportStage.prepare(req, runs)
    from pipeline.quantize.stage import QuantizeStage

    return QuantizeStage.prepare(req, runs)
