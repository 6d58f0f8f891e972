"""Small facts remembered across runs, keyed by what they were computed from: a cached re-run
reads them instead of importing `datasets`, torch or transformers to recompute them.

    memo.remember("eval-windows", source, value); memo.recall("eval-windows", source)
"""

import json
from pathlib import Path

from pipeline.core.files import sha256_json, write_json_atomic
from pipeline.core.paths import cache_root


def _path(kind: str, source: list) -> Path:
    return cache_root() / kind / f"{sha256_json(source)[:24]}.json"


def remember(kind: str, source: list, value) -> None:
    write_json_atomic(_path(kind, source), value)


def recall(kind: str, source: list):
    """The remembered value, or None (never computed, or unreadable: recompute, and the next
    write replaces it)."""
    path = _path(kind, source)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
