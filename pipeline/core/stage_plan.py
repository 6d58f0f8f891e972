"""What a stage will take before it runs — where, memory, the files it writes, time — typed, so
that the chain composes stage plans by field rather than by which keys a dict has.

Each stage's plan lives in its own folder (quantize/stage_plan.py, external/stage_plan.py,
eval/plan.py, serve/plan.py) and subclasses StagePlan with what only it has; the chain
(pipeline/chain/plan.py) adds which process each works in, the disk per filesystem, and renders.
"""

from dataclasses import asdict, dataclass, field


@dataclass
class StagePlan:
    time: str = ""  # how long, and how the figure was derived ("unknown: …" where nothing is)
    time_seconds: float | None = None
    files: list[tuple[str, int]] = field(default_factory=list)  # (what, bytes) written
    cpu_ram_bytes: int = 0  # this process's peak beside what an engine holds
    where: str | None = None
    refusals: list[str] = field(default_factory=list)  # what this host cannot do, a line each
    process: str | None = None  # the chain's: whether the stage works in a process of its own
    leaves_on_gpus_bytes: int | None = None

    def starts_engine(self) -> bool:
        """Whether the stage starts a vLLM engine (the chain gives the stages before it a
        process of their own on GPU hosts)."""
        return False

    def record(self) -> dict:
        """As `--dry-run --json` prints it: the fields set (time_seconds always: null is
        "unknown"); refusals go to the chain's list."""
        found = asdict(self)
        found.pop("refusals")
        return {k: v for k, v in found.items() if v is not None or k == "time_seconds"}


@dataclass(frozen=True)
class Options:
    """What a command sets for the stages after the artifact's (eval, serve)."""

    backend: str | None = None  # eval's --backend (None: the recipe's)
    serve_overrides: dict | None = None  # serve's settings from the command line
    port: int | None = None
    skip_unsupported: bool = False  # record a stage this host cannot run instead of refusing


NO_OPTIONS = Options()


@dataclass(frozen=True)
class Upstream:
    """What a later stage's plan takes from the chain: the GPUs this process sees (nvidia-smi's
    lines) and the artifact's planned bytes (0: online, no artifact: the original's)."""

    visible: list[str]
    artifact_bytes: int


@dataclass
class ArtifactPlan(StagePlan):
    """The plan of the stage that makes the artifact (quantize, or an import)."""

    path: str | None = None  # the quantize path it takes ("model-free", "oneshot", …)
    device_bytes: int = 0  # peak on one GPU
    artifact_bytes: int = 0  # as written (0: an online recipe writes none)
