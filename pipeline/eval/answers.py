"""Greedy answers of a model to the generation prompts (pipeline/eval/generation.py compares
them). The original's are cached beside its drift reference, per (model, prompts, generation
settings, engine: backend, device, dtype, build, batch): at BATCH, and at FLOOR_BATCH for the
noise floor (other padding, other sums: where greedy decoding parts on a near tie by itself)."""

import json
from pathlib import Path

from pipeline.config.recipe import GenerationSettings
from pipeline.core import progress
from pipeline.core.files import sha256_json, write_json_atomic
from pipeline.eval import generation, prompt_set

BATCH = 32  # prompts per generate call: the shipped set in one
FLOOR_BATCH = 16
FORMAT = "answers-v1"  # bump when the cached answers change shape: old ones are then ignored
GATE_FIELDS = {"max_length_ratio"}  # checked afresh on cached results, never inputs


def name(model_identity: dict, settings: GenerationSettings, engine: dict, batch: int) -> str:
    spec = settings.model_dump(exclude=GATE_FIELDS | {"confidence", "enabled"})
    made_of = [FORMAT, model_identity, spec, prompt_set.sha(settings), engine, batch]
    return f"answers-{sha256_json(made_of)[:16]}"


def stored(folder: Path, name: str) -> Path:
    return folder / f"{name}.json"


def load(folder: Path, name: str) -> list[list[int]] | None:
    path = stored(folder, name)
    return json.loads(path.read_text()) if path.is_file() else None


def make(backend, model, prompts: list[list[int]], settings: GenerationSettings,
         batches: list[int], pad_id: int, label: str) -> list[list[list[int]]]:  # fmt: skip
    """Per batch size, the generated ids per prompt (an EOS that ended one is its last id),
    with a bar; vLLM answers at every batch size in one engine start."""
    total = len(prompts) * len(batches)
    bar = progress.bar(total=total, desc=f"generation ({label})", unit="answer")
    try:
        return backend.generate(model, prompts, settings.max_new_tokens, batches, pad_id, bar=bar)
    finally:
        bar.close()


def save(folder: Path, name: str, made: list[list[int]]) -> None:
    write_json_atomic(stored(folder, name), made)


def drift(original: list, again: list, quantized: list, eos_ids: set[int],
          think_end: int | None, settings: GenerationSettings) -> dict:  # fmt: skip
    """The quantized model's answers against the original's, and the original's against
    itself at FLOOR_BATCH (the floor)."""
    limit = settings.max_new_tokens

    def answered(made):
        return [generation.answer(ids, eos_ids, limit) for ids in made]

    first = answered(original)
    args = (limit, think_end, settings.confidence)
    floor = generation.compare(first, answered(again), *args)
    return generation.compare(first, answered(quantized), *args) | {
        "batch_size": BATCH,
        "floor": floor | {"batch_size": FLOOR_BATCH},
    }
