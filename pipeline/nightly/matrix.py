"""The nightly matrix file (evals/nightly.yaml): models × recipes, per-cell overrides, thresholds.

A cell is one model × one recipe, named after the recipe unless it says otherwise: its history is
compared under that name, so a cell whose recipe is overridden (e.g. to try a change) is compared
with the same cell's earlier runs. An overridden recipe is written to
runs/nightly/recipes/<recipe>-<hash>.yaml and quantized into its own run directory.
"""

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, create_model
from pydantic.fields import FieldInfo

from pipeline.config import recipe as recipes
from pipeline.config.recipe import EvalBackend, ServeSettings
from pipeline.config.strict import Strict, display, load_yaml, validated
from pipeline.core.errors import UserError
from pipeline.core.files import sha256_json, sha256_text
from pipeline.core.paths import NIGHTLY_MATRIX
from pipeline.core.runs import Runs
from pipeline.external.source import resolve

STAGES = ("quantize", "eval", "serve")
RECIPES = "nightly/recipes"  # overridden recipes, under the run root (the workers pull them)


def _optional(name: str, f: FieldInfo) -> tuple[object, None]:
    """A field's type or None, defaulting to None (every ServeSettings field is annotated)."""
    if f.annotation is None:
        raise TypeError(f"serve setting {name} has no annotation")
    return f.annotation | None, None


# The serve block: any of the recipe's serve settings, each optional (the same model, so a typo
# fails when the matrix loads, not when that cell serves at night). The types are known at run
# time only: create_model takes each field as Any.
_overrides: dict[str, Any] = {n: _optional(n, f) for n, f in ServeSettings.model_fields.items()}
ServeOverrides = create_model("ServeOverrides", __base__=Strict, **_overrides)


class Thresholds(Strict):
    quality_sigma: float = Field(
        3.0, gt=0, description="a quality metric regresses when worse by this many standard errors"
    )
    throughput_band: float = Field(
        0.45, gt=0, lt=1, description="relative drop in a throughput ratio counted as noise"
    )
    memory_band: float = Field(0.01, ge=0, description="relative growth of the checkpoint")


class CellSpec(Strict):
    model: str
    recipe: str | None = Field(
        None, description="the recipe; with `artifact`, only its eval / serve settings"
    )
    artifact: str | None = Field(
        None, description="a checkpoint quantized elsewhere (folder or org/name[@rev]): imported"
    )
    name: str | None = None
    stages: list[str] | None = None
    eval_backend: EvalBackend | None = None
    serve: ServeOverrides | None = None
    recipe_overrides: dict = Field(
        default_factory=dict, description="dotted recipe keys → values, e.g. calibration.seed: 1"
    )
    tensor_parallel_size: int | None = Field(None, gt=0)
    gpus: int | None = Field(
        None, ge=0, description="GPUs the cell holds on one node (default: from the plan)"
    )


class Matrix(Strict):
    store: str = "sqlite:///runs/nightly.db"
    models: list[str] = Field(min_length=1)
    recipes: list[str] = Field(min_length=1)
    stages: list[str] = list(STAGES)
    eval_backend: EvalBackend | None = Field(None, description="default: each recipe's")
    serve: ServeOverrides = Field(
        default_factory=ServeOverrides, description="overrides of the recipes' serve settings"
    )
    thresholds: Thresholds = Thresholds()
    cells: list[CellSpec] = Field(default_factory=list, description="per-cell overrides")
    gpu: str = Field(
        "H100-80GB", description="the cluster's GPU type: what the plan sizes each cell's GPUs by"
    )
    cell_timeout_s: int = Field(
        6 * 3600, gt=0, description="a cell running longer is stopped and recorded as failed"
    )


@dataclass(frozen=True)
class Cell:
    model: str
    name: str
    recipe: str  # the recipe name, as in the matrix (an imported artifact's: its cell name)
    recipe_arg: str | None  # what --recipe gets: the name, or the overridden recipe file
    stages: tuple[str, ...]
    eval_backend: EvalBackend | None
    serve: tuple[tuple[str, object], ...]  # serve setting overrides, in order
    overrides_sha: str | None
    tensor_parallel_size: int | None  # for both serve sides, where given; else planned
    artifact: str | None = None  # what --artifact gets
    gpus: int | None = None  # GPUs to hold on one node, where given; else planned
    users: int = 1  # the serve sweep's largest concurrency
    context: int = 1  # tokens per request: input + output
    kv_cache_dtype: str = "auto"  # the artifact's serve side

    @property
    def folder(self) -> tuple[str, str]:
        """What decides its run folder (runs/<model>/<recipe>): cells that share one (the same
        recipe with another eval backend, say) must not run at once (executors.py)."""
        if self.artifact is not None:
            return self.model, f"artifact:{self.artifact}"
        return self.model, Path(self.recipe_arg).stem if self.recipe_arg else self.name


def load(path: str | None) -> tuple[Matrix, str]:
    """(matrix, sha256 of its text): a changed matrix starts a new run instead of resuming."""
    p = Path(path) if path else NIGHTLY_MATRIX
    data, text = load_yaml(p, "nightly matrix")
    matrix = validated(Matrix, data or {}, display(p), text)
    for stage in [*matrix.stages, *(s for c in matrix.cells for s in (c.stages or []))]:
        if stage not in STAGES:
            raise UserError(f"{display(p)}: unknown stage '{stage}' (valid: {', '.join(STAGES)})")
    return matrix, sha256_text(text)


def cells(matrix: Matrix, runs: Runs) -> list[Cell]:
    """Every model × recipe, then the per-cell entries: overriding a matching cell, or adding.
    A recipe with overrides is written under `runs` (nightly/recipes/, committed for the
    workers)."""
    # a cell naming neither recipe nor artifact is keyed by None until _cell refuses it
    specs: dict[tuple[str, str | None], CellSpec] = {
        (m, r): CellSpec(model=m, recipe=r) for m in matrix.models for r in matrix.recipes
    }
    for spec in matrix.cells:
        specs[(spec.model, spec.name or spec.artifact or spec.recipe)] = spec
    return [_cell(matrix, spec, runs) for spec in specs.values()]


def _cell(matrix: Matrix, spec: CellSpec, runs: Runs) -> Cell:
    if spec.artifact is None and spec.recipe is None:
        raise UserError(f"cell {spec.model}: give a recipe or an artifact")
    if spec.artifact is not None and spec.recipe_overrides:
        raise UserError(f"cell {spec.model} × {spec.artifact}: recipe_overrides need a recipe")
    # unknown recipe: one line, before anything runs (an artifact's default settings: gptq's)
    rf = recipes.load("gptq" if spec.recipe is None else spec.recipe)
    recipe_arg, overrides_sha = spec.recipe, None
    if spec.recipe_overrides:
        overrides_sha = sha256_json(spec.recipe_overrides)
        recipe_arg = str(_write_overridden(rf, spec.recipe_overrides, overrides_sha, runs))
    serve = matrix.serve.model_dump(exclude_none=True)
    serve |= spec.serve.model_dump(exclude_none=True) if spec.serve else {}
    if spec.tensor_parallel_size:
        serve["tensor_parallel_size"] = spec.tensor_parallel_size
    if spec.artifact is not None:
        name = spec.name or resolve(spec.artifact).run_name
        recipe = name  # an imported artifact's recipe is its cell name
    else:
        assert spec.recipe is not None  # refused above: neither a recipe nor an artifact
        name, recipe = spec.name or spec.recipe, spec.recipe
    given_tp = "tensor_parallel_size" in {*serve, *rf.spec.serve.model_fields_set}
    # every bound (gt=0, …) checked against the recipe's own settings, before anything runs
    settings = validated(
        ServeSettings,
        {**rf.spec.serve.model_dump(), **serve},
        f"cell {spec.model} × {name}: serve",
    )
    return Cell(
        model=spec.model,
        name=name,
        recipe=recipe,
        recipe_arg=recipe_arg,
        stages=tuple(spec.stages or matrix.stages),
        eval_backend=spec.eval_backend or matrix.eval_backend,
        serve=tuple(serve.items()),
        overrides_sha=overrides_sha,
        tensor_parallel_size=settings.tensor_parallel_size if given_tp else None,
        artifact=spec.artifact,
        gpus=spec.gpus,
        users=max(settings.concurrency),
        context=settings.input_len + settings.output_len,
        kv_cache_dtype=settings.kv_cache_dtype,
    )


def _write_overridden(rf, overrides: dict, digest: str, runs: Runs) -> Path:
    data = yaml.safe_load(rf.text)
    for dotted, value in overrides.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            if not isinstance(node.get(key), dict):
                raise UserError(f"recipe {rf.name}: override '{dotted}': no mapping '{key}'")
            node = node[key]
        node[last] = copy.deepcopy(value)
    path = runs.local / RECIPES / f"{rf.name}-{digest[:8]}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"# {rf.name} with nightly overrides {overrides}\n" + yaml.safe_dump(
        data, sort_keys=False
    )
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    recipes.load(str(path))  # an override that breaks the recipe fails here, in one line
    runs.push(RECIPES)  # RUNS_DIR in object storage: for the workers
    return path
