"""Which stored reference an evaluation needs, decided without torch or transformers: a cached
re-run must not pay seconds of imports to find it has nothing to do.

The reference key hashes the token windows (pipeline/eval/windows.py). Tokenizing needs the
tokenizer, so the windows' fingerprints are remembered per window source (the model, the texts'
hashes, context length and budget) in <cache>/eval-windows/, written after the first
tokenization; later runs recall them and tokenize only when they have work to do.
"""

import json
from pathlib import Path

from pipeline.config.recipe import EvalSettings
from pipeline.core.files import sha256_json, waiting_lock, write_json_atomic
from pipeline.core.paths import cache_root

FORMAT = "mass-v2"  # bump when the stored columns change: old references are then ignored


def key(model_identity: dict, windows: dict, settings: EvalSettings, backend: str) -> str:
    """windows: {"sha256", "shape"} of the token windows (windows.fingerprint)."""
    kept = [settings.reference_mass, settings.reference_max_k]
    parts = [FORMAT, model_identity, windows["sha256"], list(windows["shape"]), kept, backend]
    return sha256_json(parts)[:16]


def lock(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    return waiting_lock(folder / ".lock")


def _path(source: list) -> Path:
    return cache_root() / "eval-windows" / f"{sha256_json(source)[:24]}.json"


def remember(source: list, prints: dict[str, dict]) -> None:
    write_json_atomic(_path(source), prints)


def recall(source: list) -> dict[str, dict] | None:
    path = _path(source)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # tokenize again; the next write replaces it
