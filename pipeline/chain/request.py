"""A chain asked for by a program, not a command line: a nightly cell hands its `pipeline run`
child this as JSON on stdin (`pipeline run --request - --json`), typed at both ends, where it
once spelled the cell out as flags for the child to parse back.

    spec = ChainSpec(model="tiny-llama", recipe="fp8", stages=("eval",))
    subprocess.run([..., "run", "--request", "-", "--json"], input=spec.model_dump_json())
"""

from typing import Any

from pipeline.config.recipe import EvalBackend
from pipeline.config.strict import Strict


class ChainSpec(Strict):
    model: str  # an alias, a hub id or a folder
    recipe: str | None = None  # a recipe's name or file (None: the default, or the import's)
    artifact: str | None = None  # a checkpoint quantized elsewhere, imported
    stages: tuple[str, ...] = ("eval", "serve")  # after the artifact's
    backend: EvalBackend | None = None  # the eval's (None: the recipe's)
    serve: dict[str, Any] = {}  # serve settings over the recipe's
    skip_unsupported: bool = True  # record a stage this host cannot run, and go on
