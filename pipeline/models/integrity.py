"""Is a model folder whole? Checked before anything is created, without loading a tensor.

A half-finished download or copy shows as: config.json that does not parse or names no
`model_type`; no weights; an index naming shards that are missing; a safetensors file whose
header does not parse or whose tensors end beyond (or short of) the file's size: truncated.
"""

import json
import struct
from pathlib import Path

from pipeline.core.errors import UserError

MAX_HEADER = 100 * 2**20  # safetensors caps its JSON header at 100 MB
INDEX = "model.safetensors.index.json"


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path} does not parse as JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise UserError(f"{path} names no model_type: not a transformers model config")
    return config


def check_weights(folder: Path) -> None:
    """Every weight file present and whole; raises UserError naming the first that is not."""
    shards = sorted(folder.glob("*.safetensors"))
    index = folder / INDEX
    if index.is_file():
        try:
            listed = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise UserError(f"{index} does not parse (no weight_map)") from None
        missing = sorted(name for name in listed if not (folder / name).is_file())
        if missing:
            raise UserError(
                f"{folder} is incomplete: {len(missing)} of {len(listed)} shards named in "
                f"{INDEX} are missing (e.g. {missing[0]}); download it again"
            )
    if not shards:
        other = sorted(p.name for p in folder.glob("*.bin")) or sorted(
            p.name for p in folder.iterdir()
        )
        raise UserError(
            f"{folder} has no *.safetensors weights (found: {', '.join(other[:5]) or 'nothing'})"
        )
    for shard in shards:
        check_safetensors(shard)


def check_safetensors(path: Path) -> None:
    """The header parses and its tensors exactly fill the file (not truncated, not padded)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise UserError(f"{path} is truncated ({size} bytes): download it again")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER, size - 8):
            raise UserError(f"{path} is not a safetensors file (header length {length:,})")
        try:
            header = json.loads(f.read(length))
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{path}: its safetensors header does not parse") from None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        raise UserError(
            f"{path} is truncated: its header describes {expected:,} bytes, the file has "
            f"{size:,}; download it again"
        )
    if size > expected:
        raise UserError(f"{path} has {size - expected:,} bytes beyond its tensors: corrupt")
