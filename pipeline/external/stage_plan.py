"""The import stage's plan as the chain shows it: nothing to quantize; the base model's
download (its log-probs are the reference) and the checkpoint as shipped."""

from pipeline.artifact import Artifact
from pipeline.core.stage_plan import ArtifactPlan


def plan(stage: Artifact) -> ArtifactPlan:
    shipped = stage.plan()["ideal_bytes"]
    base = stage.geometry.original_bytes
    downloads = [("original (hub cache)", base)] if stage.ref.from_hub else []
    return ArtifactPlan(
        where="nothing to quantize (imported)",
        files=[*downloads, ("artifact (imported)", shipped)],
        artifact_bytes=shipped,
        time_seconds=0.0,
        time="nothing to quantize",
    )
