"""An artifact and the stages after it: the protocol a quantize or an import stage meets
(protocol.py), and the base of the stages that work on one (after.py). Below the stages, above
what an artifact names (its recipe, model reference, geometry)."""

from pipeline.artifact.after import AfterQuantize
from pipeline.artifact.protocol import Artifact

__all__ = ["AfterQuantize", "Artifact"]
