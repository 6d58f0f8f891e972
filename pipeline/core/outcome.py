"""What a command ended with, for machines: `--json` prints it as the one line on stdout
(`python -m pipeline schema outcome`). Programs read `status` and `reason`, never the messages,
which are for people and may be reworded."""

from typing import Literal

from pydantic import BaseModel, Field

from pipeline.core.errors import EXIT_CODES

SCHEMA_VERSION = 1
Status = Literal[
    "ok", "user_error", "gate_failed", "unsupported", "server_error", "hub_error", "artifact_check",
    "internal_error", "interrupted", "gate_inconclusive", "transient", "terminated",
]  # fmt: skip


class StageOutcome(BaseModel):
    stage: str
    status: Literal["done", "cached", "gate_failed", "unsupported", "failed"]
    reason: Status | None = Field(None, description="why it did not finish: an error class")
    message: str | None = Field(None, description="for people")
    fingerprint: str | None = None
    metrics: dict = Field(default_factory=dict)
    paths: dict[str, str] = Field(default_factory=dict)
    seconds: float | None = Field(None, description="wall time of the stage in this command")


class Outcome(BaseModel):
    schema_version: int = Field(SCHEMA_VERSION, description="bumped when fields change meaning")
    command: str
    status: Status
    exit_code: int = Field(
        description="0 ok, 1 internal, 2 user error, 3 gate failed or inconclusive, 4 host "
        "cannot, 75 transient (try again later), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM)"
    )
    message: str | None = None
    model: str | None = None
    recipe: str | None = None
    stages: list[StageOutcome] = Field(default_factory=list)
    paths: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, command: str, status: str, message: str | None = None, **fields) -> "Outcome":
        return cls(
            command=command, status=status, exit_code=EXIT_CODES[status], message=message, **fields
        )


def overall(stages: list[StageOutcome]) -> tuple[str, str | None]:
    """(status, message) of a flow from its stages: the first failure, else a failed gate, else
    a stage this host could not run, else ok."""
    for wanted in ("failed", "gate_failed", "unsupported"):
        for s in stages:
            if s.status == wanted:
                return (s.reason or "internal_error"), s.message
    return "ok", None
