"""The run directory `runs/<model>/<recipe>/` and its `manifest.json` (schema: `python -m pipeline
schema manifest`).

    artifact/                 quantize: the compressed-tensors checkpoint (one; its inputs decide)
    eval/<fingerprint>/       eval: one folder per distinct inputs (backend, settings, artifact)
    serve/<fingerprint>/      serve: one folder per distinct settings / host / artifact
    publish/                  publish: the last card sent
    manifest.json             `stages`: the latest entry per stage (what `make run`, publish and
                              the card use); `results`: every kept entry per stage, by fingerprint

A stage is "done" only after its outputs were renamed into place; a killed run leaves "running"
(or nothing), never "done". Older results are kept until pruned (`make clean-cache`), so runs with
different settings reuse their own results instead of evicting each other.
"""

import datetime as dt
import json
import os
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from pipeline.core.errors import UserError
from pipeline.core.files import exclusive_lock, folder_bytes, write_json_atomic
from pipeline.core.runs import ORIGINAL, Runs

SCHEMA_VERSION = 2
HISTORY_STAGES = ("eval", "serve")  # stages that keep one result per inputs fingerprint


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class StageEntry(BaseModel):
    status: Literal["running", "done", "failed", "interrupted"]
    started: str = Field(description="ISO-8601 UTC")
    ended: str | None = None
    fingerprint: str = Field(description="sha256 of `inputs`; same fingerprint + done = cached")
    inputs: dict = Field(description="everything that decides the result")
    metrics: dict = Field(default_factory=dict, description="stage-specific, all measured")
    outputs: dict[str, str] = Field(default_factory=dict, description="paths in the run dir")
    environment: dict = Field(default_factory=dict, description="host, CPU/GPU, Python")
    error: str | None = Field(None, description="one line, when failed or interrupted")


class ModelHeader(BaseModel):
    name: str
    source: str
    id: str | None = None
    revision: str | None = None
    built_from: dict | None = Field(
        None,
        description="a packaged model's origin: package, version, wheel and GGUF sha256, "
        "GGUF type, license (pipeline/models/packaged.py)",
    )


class RecipeHeader(BaseModel):
    name: str
    path: str
    sha256: str


class Manifest(BaseModel):
    schema_version: int = Field(SCHEMA_VERSION, description="2: results kept per fingerprint")
    model: ModelHeader | None = None
    recipe: RecipeHeader | None = None
    stages: dict[str, StageEntry] = Field(
        default_factory=dict, description="the latest entry of each stage"
    )
    results: dict[str, dict[str, StageEntry]] = Field(
        default_factory=dict, description="every kept entry of eval and serve, by fingerprint"
    )


class RunDir:
    """One run folder under `runs`' local root: its manifest, lock, cached results and pruning.
    It opens no store: each manifest write is committed through `runs` (Runs.push_run: a
    no-op without a store), and what it reads was pulled before it was made (Runs.pull_run).
    A folder given as `runs` is a local root alone."""

    def __init__(self, model_name: str, recipe_name: str, runs: Runs | Path):
        self.runs = runs if isinstance(runs, Runs) else Runs(Path(runs))
        self.model_name, self.recipe_name = model_name, recipe_name
        self.path = self.runs.folder(model_name, recipe_name)
        self.manifest_path = self.path / "manifest.json"

    @property
    def original(self) -> Path:
        """Its model's folder for the original (the references eval and serve keep), pulled
        and committed with this run (Runs.pull_run, push_run)."""
        return self.runs.folder(self.model_name, ORIGINAL)

    def check_writable(self) -> None:
        """Refuse up front (nothing created) where this run's folder cannot be made or written."""
        existing = self.path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise UserError(f"cannot create run folder {self.path}: {existing} is not a folder")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UserError(f"cannot create run folder {self.path}: {existing} is not writable")
        if self.manifest_path.exists() and not os.access(self.manifest_path, os.W_OK):
            raise UserError(f"{self.manifest_path} is not writable")

    def lock(self):
        return exclusive_lock(self.path / ".lock", f"run directory {self.path}")

    def manifest(self) -> Manifest:
        if not self.manifest_path.is_file():
            return Manifest()
        data = json.loads(self.manifest_path.read_text())
        if data.get("schema") == 1:  # written before results were kept per fingerprint
            migrated = Manifest.model_validate(_migrate_v1(self.path, data))
            self.write(migrated)
            return migrated
        return Manifest.model_validate(data)

    def stage(self, name: str) -> StageEntry | None:
        return self.manifest().stages.get(name)

    def update(self, header: dict, stage: str, entry: StageEntry) -> None:
        """Record one stage's entry as its latest (and, for history stages, among its results)."""
        m = Manifest.model_validate({**self.manifest().model_dump(), **header})
        m.stages[stage] = entry
        if stage in HISTORY_STAGES:
            m.results.setdefault(stage, {})[entry.fingerprint] = entry
        self.write(m)

    def write(self, m: Manifest) -> None:
        write_json_atomic(self.manifest_path, m.model_dump(mode="json"))
        self.commit()

    def commit(self) -> None:
        """In object storage: the original's references, then this run (its manifest last),
        each object checked held by the store, what it lacks uploaded again."""
        self.runs.push_run(self.model_name, self.recipe_name)

    def cached(self, stage: str, fingerprint: str) -> StageEntry | None:
        """The done entry with these inputs whose outputs still exist, if any."""
        m = self.manifest()
        found = m.results.get(stage, {}).get(fingerprint)
        latest = m.stages.get(stage)
        if found is None and latest and latest.fingerprint == fingerprint:
            found = latest
        if found and found.status == "done" and self._outputs_exist(found):
            return found
        return None

    def _outputs_exist(self, entry: StageEntry) -> bool:
        return all((self.path / out).exists() for out in entry.outputs.values())

    def prune(self, stage: str, keep: int, max_bytes: int | None = None) -> list[str]:
        """Remove a stage's older results beyond `keep` (and beyond `max_bytes` in all), oldest
        first; never the latest. Returns the removed folders."""
        m = self.manifest()
        latest = m.stages.get(stage)
        kept = sorted(
            m.results.get(stage, {}).values(), key=lambda e: e.ended or e.started, reverse=True
        )
        older = [e for e in kept if not latest or e.fingerprint != latest.fingerprint]
        budget = max_bytes
        if budget is not None and latest:
            budget -= self._bytes(stage, latest)
        removed, survivors = [], 0
        for entry in older:
            size = self._bytes(stage, entry)
            if survivors < keep - 1 and (budget is None or size <= budget):
                survivors += 1
                budget = None if budget is None else budget - size
                continue
            folder = self.result_folder(stage, entry.fingerprint)
            shutil.rmtree(folder, ignore_errors=True)
            del m.results[stage][entry.fingerprint]
            removed.append(str(folder))
        if removed:
            self.write(m)
        return removed

    def _bytes(self, stage: str, entry: StageEntry) -> int:
        folder = self.result_folder(stage, entry.fingerprint)
        return folder_bytes(folder) if folder.is_dir() else 0

    def result_folder(self, stage: str, fingerprint: str) -> Path:
        return self.path / stage / fingerprint[:16]


def _migrate_v1(path: Path, data: dict) -> dict:
    """Schema 1 kept one result per stage directly in eval/ and serve/: move each into its
    fingerprint's folder, once (the manifest is rewritten by the next update)."""
    data = {k: v for k, v in data.items() if k != "schema"}
    data["schema_version"] = SCHEMA_VERSION
    data["results"] = {}
    for stage in HISTORY_STAGES:
        entry = data.get("stages", {}).get(stage)
        if not entry:
            continue
        sub = entry["fingerprint"][:16]
        old, new = path / stage, path / stage / sub
        if entry["status"] == "done" and old.is_dir() and not new.exists():
            tmp = path / f".{stage}.migrating-{os.getpid()}"
            os.replace(old, tmp)
            new.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, new)
        entry["outputs"] = {
            k: f"{stage}/{sub}/{Path(v).relative_to(stage)}" for k, v in entry["outputs"].items()
        }
        data["results"][stage] = {entry["fingerprint"]: entry}
    return data
