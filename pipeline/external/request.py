"""What an import is asked, typed once where the ask comes in (the command line's
`quantize --import` / `--artifact`: cli/requests.py): the base model resolved, the artifact
named (a folder or org/name[@revision], source.resolve), and the recipe whose eval and serve
settings apply, loaded — None: the stage picks the shipped recipe of the artifact's scheme."""

from dataclasses import dataclass

from pipeline.config.recipe import RecipeFile
from pipeline.external.source import ExternalRef
from pipeline.models.aliases import ModelRef


@dataclass(frozen=True)
class ImportRequest:
    ref: ModelRef  # the base: its config and tokenizer check the artifact's
    external: ExternalRef
    settings: RecipeFile | None = None  # --recipe with --import; None: of the artifact's scheme
