"""The nightly matrix file (evals/nightly.yaml): models × recipes, per-cell overrides, thresholds.

A cell is one model × one recipe, named after the recipe unless it says otherwise: its history is
compared under that name, so a cell whose recipe is overridden (e.g. to try a change) is compared
with the same cell's earlier runs. An overridden recipe is written to
runs/nightly/recipes/<recipe>-<hash>.yaml and quantized into its own run directory.
"""

import copy
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline import recipe as recipes
from pipeline.errors import UserError
from pipeline.fsutil import runs_root, sha256_json, sha256_text

DEFAULT = Path(__file__).resolve().parents[2] / "evals" / "nightly.yaml"
STAGES = ("quantize", "eval", "serve")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Thresholds(Strict):
    quality_sigma: float = Field(
        3.0, gt=0, description="a quality metric regresses when worse by this many standard errors"
    )
    throughput_band: float = Field(
        0.25, gt=0, lt=1, description="relative drop in a throughput ratio counted as noise"
    )
    memory_band: float = Field(0.01, ge=0, description="relative growth of the checkpoint")


class CellSpec(Strict):
    model: str
    recipe: str
    name: str | None = None
    stages: list[str] | None = None
    eval_backend: str | None = None
    serve: dict | None = None
    recipe_overrides: dict = Field(
        default_factory=dict, description="dotted recipe keys → values, e.g. calibration.seed: 1"
    )
    tensor_parallel_size: int | None = Field(None, gt=0)


class Matrix(Strict):
    store: str = "sqlite:///runs/nightly.db"
    models: list[str] = Field(min_length=1)
    recipes: list[str] = Field(min_length=1)
    stages: list[str] = list(STAGES)
    eval_backend: str | None = Field(None, description="hf | vllm; default: each recipe's")
    serve: dict = Field(default_factory=dict, description="CLI overrides of the serve settings")
    thresholds: Thresholds = Thresholds()
    cells: list[CellSpec] = Field(default_factory=list, description="per-cell overrides")


@dataclass(frozen=True)
class Cell:
    model: str
    name: str
    recipe: str  # the recipe name, as in the matrix
    recipe_arg: str  # what --recipe gets: the name, or the overridden recipe file
    stages: tuple[str, ...]
    eval_backend: str | None
    serve_args: tuple[str, ...]
    overrides_sha: str | None
    tensor_parallel_size: int

    @property
    def run_name(self) -> str:
        """The run directory's recipe part."""
        return Path(self.recipe_arg).stem


def load(path: str | None) -> tuple[Matrix, str]:
    """(matrix, sha256 of its text): a changed matrix starts a new run instead of resuming."""
    p = Path(path) if path else DEFAULT
    if not p.is_file():
        raise UserError(f"nightly matrix not found: {p}")
    text = p.read_text()
    try:
        data = yaml.safe_load(text)
        matrix = Matrix.model_validate(data or {})
    except yaml.YAMLError as e:
        raise UserError(f"{p}: malformed YAML: {getattr(e, 'problem', e)}") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UserError(f"{p}: {where}: {first['msg']}") from None
    for stage in [*matrix.stages, *(s for c in matrix.cells for s in (c.stages or []))]:
        if stage not in STAGES:
            raise UserError(f"{p}: unknown stage '{stage}' (valid: {', '.join(STAGES)})")
    return matrix, sha256_text(text)


def cells(matrix: Matrix) -> list[Cell]:
    """Every model × recipe, then the per-cell entries: overriding a matching cell, or adding."""
    specs = {(m, r): CellSpec(model=m, recipe=r) for m in matrix.models for r in matrix.recipes}
    for spec in matrix.cells:
        specs[(spec.model, spec.name or spec.recipe)] = spec
    return [_cell(matrix, spec) for spec in specs.values()]


def _cell(matrix: Matrix, spec: CellSpec) -> Cell:
    rf = recipes.load(spec.recipe)  # unknown recipe: one line, before anything runs
    recipe_arg, overrides_sha = spec.recipe, None
    if spec.recipe_overrides:
        overrides_sha = sha256_json(spec.recipe_overrides)
        recipe_arg = str(_write_overridden(rf, spec.recipe_overrides, overrides_sha))
    serve = {**matrix.serve, **(spec.serve or {})}
    tp = spec.tensor_parallel_size or int(serve.get("tensor_parallel_size", 1))
    if spec.tensor_parallel_size:
        serve["tensor_parallel_size"] = tp
    return Cell(
        model=spec.model,
        name=spec.name or spec.recipe,
        recipe=spec.recipe,
        recipe_arg=recipe_arg,
        stages=tuple(spec.stages or matrix.stages),
        eval_backend=spec.eval_backend or matrix.eval_backend,
        serve_args=tuple(_serve_args(serve)),
        overrides_sha=overrides_sha,
        tensor_parallel_size=tp,
    )


def _write_overridden(rf, overrides: dict, digest: str) -> Path:
    data = yaml.safe_load(rf.text)
    for dotted, value in overrides.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            if not isinstance(node.get(key), dict):
                raise UserError(f"recipe {rf.name}: override '{dotted}': no mapping '{key}'")
            node = node[key]
        node[last] = copy.deepcopy(value)
    path = runs_root() / "nightly" / "recipes" / f"{rf.name}-{digest[:8]}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"# {rf.name} with nightly overrides {overrides}\n" + yaml.safe_dump(
        data, sort_keys=False
    )
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    recipes.load(str(path))  # an override that breaks the recipe fails here, in one line
    return path


def _serve_args(serve: dict) -> list[str]:
    args = []
    for key, value in serve.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        elif isinstance(value, list):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args
