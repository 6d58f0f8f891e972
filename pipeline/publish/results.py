"""quant_pipeline/publish.json, typed (`python -m pipeline schema publish`): what was published,
from which stage results. A repo holding it was published by this pipeline, so a re-publish
may replace its files."""

from pydantic import BaseModel, Field

from pipeline.core.rundir import StageEntry

# 2: no `published` time, so re-publishing unchanged results sends identical files
SCHEMA_VERSION = 2


class UsedResult(BaseModel):
    """The manifest's latest eval and serve results, which the card reports."""

    eval_fingerprint: str | None = None
    eval_backend: str | None = None
    eval_ended: str | None = None
    serve_fingerprint: str | None = None
    serve_ended: str | None = None

    @classmethod
    def of(cls, stages: dict[str, StageEntry], without_serve: bool = False) -> "UsedResult":
        ev, sv = stages.get("eval"), None if without_serve else stages.get("serve")
        ev = ev if ev and ev.status == "done" else None
        sv = sv if sv and sv.status == "done" else None
        return cls(
            eval_fingerprint=ev.fingerprint if ev else None,
            eval_backend=ev.inputs.get("backend") if ev else None,
            eval_ended=ev.ended if ev else None,
            serve_fingerprint=sv.fingerprint if sv else None,
            serve_ended=sv.ended if sv else None,
        )


class PublishRecord(BaseModel):
    schema_version: int = Field(SCHEMA_VERSION, description="bumped when fields change meaning")
    tool: str = "quant-pipeline"
    model: str
    base_model: str | None
    recipe: str
    artifact_fingerprint: str = Field(description="the quantize entry's fingerprint")
    used: UsedResult
    pipeline: dict = Field(description="{commit, dirty} of the pipeline checkout")
    forced: list[str] = Field(description="why it would have been refused (--ignore-gates)")
