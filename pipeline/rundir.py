"""The run directory `runs/<model>/<recipe>/` and its `manifest.json`.

Each stage writes only under its own folder and records one entry in the manifest:

    {
      "schema": 1,
      "model":  {"name", "source", "id", "revision"},
      "recipe": {"name", "path", "sha256"},
      "stages": {
        "<stage>": {
          "status": "running" | "done" | "failed",
          "started": ISO-8601 UTC, "ended": ISO-8601 UTC or null,
          "fingerprint": sha256 of `inputs`; equal fingerprint + "done" = cached,
          "inputs": {"model", "recipe_sha256", "data", "settings", "libraries"},
          "metrics": {...},          # stage-specific, all measured
          "outputs": {"artifact": "artifact"},   # paths relative to the run dir
          "environment": {...},      # host, CPU/GPU, Python
          "error": "one line"        # when failed
        }
      }
    }

A stage is "done" only after its outputs were renamed into place; a killed run leaves
"running" (or nothing), never "done".
"""

import datetime as dt
import json
from pathlib import Path

from pipeline.fsutil import exclusive_lock, runs_root, write_json_atomic

SCHEMA = 1


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class RunDir:
    def __init__(self, model_name: str, recipe_name: str, root: Path | None = None):
        self.path = (root or runs_root()) / model_name / recipe_name
        self.manifest_path = self.path / "manifest.json"

    def lock(self):
        return exclusive_lock(self.path / ".lock", f"run directory {self.path}")

    def manifest(self) -> dict:
        if self.manifest_path.is_file():
            return json.loads(self.manifest_path.read_text())
        return {"schema": SCHEMA, "stages": {}}

    def stage(self, name: str) -> dict | None:
        return self.manifest()["stages"].get(name)

    def update(self, header: dict, stage: str, entry: dict) -> None:
        """Replace one stage's entry (and the header keys) in one atomic write."""
        old = self.manifest()
        stages = {**old["stages"], stage: entry}
        write_json_atomic(self.manifest_path, {**old, **header, "stages": stages})

    def is_cached(self, stage: str, fingerprint: str, outputs: list[str]) -> bool:
        entry = self.stage(stage)
        return bool(
            entry
            and entry.get("status") == "done"
            and entry.get("fingerprint") == fingerprint
            and all((self.path / out).exists() for out in outputs)
        )
