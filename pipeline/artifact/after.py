"""The stages that work on an artifact (eval, serve, publish): they live in its quantize (or
import) stage's run dir and record the same model and recipe header."""

from pipeline.artifact.protocol import Artifact
from pipeline.core.files import staging_dir
from pipeline.core.rundir import RunDir, StageEntry
from pipeline.core.stage import Verdict


class AfterQuantize:
    """The base of eval, serve and publish: run dir and header are their artifact's."""

    quantize: Artifact  # the quantize or import stage that made it
    staging = staticmethod(staging_dir)  # serve and publish bring their own

    @property
    def starts_engine(self) -> bool:  # serve's does; eval's on its vllm backend
        return False

    def verdict(self, entry: StageEntry) -> Verdict | None:
        return None  # no gates: eval has them

    @property
    def rundir(self) -> RunDir:
        return self.quantize.rundir

    @property
    def header(self) -> dict:
        return self.quantize.header
