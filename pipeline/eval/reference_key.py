"""Which stored reference an evaluation needs, decided without torch or transformers: a cached
re-run must not pay seconds of imports to find it has nothing to do.

The reference key hashes the token windows (pipeline/eval/windows.py) and the engine that
scores them (pipeline/engines/vllm/engine_identity.py). Tokenizing needs the tokenizer, so the
windows' fingerprints are remembered per window source (the model, the texts' hashes, context length
and budget) in <cache>/eval-windows/, written after the first tokenization; later runs recall
them and tokenize only when they have work to do.
"""

from pathlib import Path

from pipeline.config.recipe import EvalSettings
from pipeline.core import memo
from pipeline.core.files import sha256_json, waiting_lock

FORMAT = "mass-v2"  # bump when the stored columns change: old references are then ignored


def key(model_identity: dict, windows: dict, settings: EvalSettings, engine: dict) -> str:
    """windows: {"sha256", "shape"} of the token windows (windows.fingerprint); engine: the
    backend with its device, dtype and build (engine_identity.identity): a reference scored
    in float32 on a CPU is not the one a bf16 GPU eval compares against."""
    kept = [settings.reference_mass, settings.reference_max_k]
    parts = [FORMAT, model_identity, windows["sha256"], list(windows["shape"]), kept, engine]
    return sha256_json(parts)[:16]


def stored(folder: Path, name: str) -> Path:
    """A stored reference's file (pipeline/eval/reference.py writes it)."""
    return folder / f"{name}.pt"


def lock(folder: Path, what: object):
    """The lock of one reference (or one set of task scores) in the folder: two evals that need
    the same one wait for each other; two that need different ones (other settings, tasks) do
    not."""
    folder.mkdir(parents=True, exist_ok=True)
    return waiting_lock(folder / f".lock-{sha256_json(what)[:16]}")


def remember(source: list, prints: dict[str, dict]) -> None:
    memo.remember("eval-windows", source, prints)


def recall(source: list) -> dict[str, dict] | None:
    return memo.recall("eval-windows", source)
