"""`make compare RECIPES=gptq CALIB=python-docs,chat.jsonl SAMPLES=64,256 SEEDS=42,43
EVAL_DATA=mine.jsonl`: the calibration sets to compare, each as a recipe of its own — the
recipe with only its calibration (and, with EVAL_DATA, its held-out text) changed — written
beside the comparison and run like any recipe file, so that every cell is cached in a run folder
of its own (`runs/<model>/gptq.python-docs.n256/`) and can be re-run alone.

    python-docs          the offline default (its `calibration` split)
    python-docs-chat     the same documents as conversations, rendered with the chat template
    path/file.txt        one sample per paragraph
    path/file.jsonl      {"text": …} per line, or {"messages": [...]} (rendered with the template)
    path/file.parquet    a `text` column
    org/name[:split]     a hub data set (the recipe's column and configuration)
"""

from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.config import recipe
from pipeline.config.recipe import RecipeFile
from pipeline.core.errors import UserError
from pipeline.core.files import write_text_atomic
from pipeline.data import chat_docs
from pipeline.data.texts import DEFAULT, check_source
from pipeline.quantize import plan


@dataclass(frozen=True)
class CalibrationSet:
    label: str  # a file's stem, a hub id with / as --, or the built-in name
    dataset: str
    split: str
    chat: bool
    samples: int | None  # SAMPLES: None = the recipe's (and tiny-llama's cap)
    seed: int


def parse(base: RecipeFile, calib: str | None, samples: str | None, seeds: str | None):
    """Every (set × samples × seed), checked before anything runs; one line per mistake."""
    if not plan.needs_calibration(base):
        raise UserError(
            f"recipe {base.name} calibrates nothing (data-free: its weights are rounded without "
            "data), so calibration sets cannot differ; compare them for a recipe that "
            "calibrates: gptq, awq, int8, autoround"
        )
    cal = base.spec.calibration
    sources = _names(calib or cal.dataset, "--calib")
    counts = (
        [_count(x, "--samples", 1) for x in _names(samples, "--samples")] if samples else [None]
    )
    draws = [_count(x, "--seeds", 0) for x in _names(seeds, "--seeds")] if seeds else [cal.seed]
    sets = []
    for source in sources:
        label, dataset, split, chat = _source(source, cal)
        column = "messages" if chat else cal.text_column
        check_source(dataset, split, column, "--calib")
        sets += [CalibrationSet(label, dataset, split, chat, n, s) for n in counts for s in draws]
    labels = [s.label for s in sets[:: len(counts) * len(draws)]]
    if len(set(labels)) != len(labels):
        twice = next(x for x in labels if labels.count(x) > 1)
        raise UserError(f"--calib: two sets would be named {twice!r}; rename one file")
    return sets


def name(base: RecipeFile, s: CalibrationSet) -> str:
    """The cell's recipe (and run folder) name: the seed only where it is not the recipe's."""
    parts = [base.name, s.label]
    if s.samples is not None:
        parts.append(f"n{s.samples}")
    if s.seed != base.spec.calibration.seed:
        parts.append(f"seed{s.seed}")
    return ".".join(parts)


def recipe_text(base: RecipeFile, s: CalibrationSet, eval_data: str | None) -> str:
    """The base recipe as written, but its calibration (and eval data) set to this cell's."""
    data = yaml.safe_load(base.text)
    cal = dict(data.get("calibration") or {})
    cal |= {"dataset": s.dataset, "split": s.split, "chat_template": s.chat, "seed": s.seed}
    if s.samples is not None:
        cal["num_samples"] = s.samples
    data["calibration"] = cal
    if eval_data:
        dataset, _, split = eval_data.partition(":")
        held = dict(data.get("eval") or {})
        held |= {"dataset": dataset} | ({"split": split} if split else {})
        data["eval"] = held
    head = f"# {base.name} calibrated on {s.dataset} (make compare CALIB=…; from {base.path})\n"
    return head + yaml.safe_dump(data, sort_keys=False, width=1000)


def derived(folder: Path, base: RecipeFile, s: CalibrationSet, eval_data: str | None):
    """The cell's recipe, checked as a recipe file is, at the path `write` gives it (a dry run
    writes nothing)."""
    text = recipe_text(base, s, eval_data)
    return recipe.parsed(folder / f"{name(base, s)}.yaml", yaml.safe_load(text), text)


def write(rf: RecipeFile) -> None:
    """Only when it changed (a cached comparison rewrites the same text)."""
    if not (rf.path.is_file() and rf.path.read_text() == rf.text):
        write_text_atomic(rf.path, rf.text)


def _names(text: str | None, flag: str) -> list[str]:
    names = [x.strip() for x in (text or "").split(",") if x.strip()]
    if not names:
        raise UserError(f"{flag}: name at least one")
    if len(set(names)) != len(names):
        twice = next(x for x in names if names.count(x) > 1)
        raise UserError(f"{flag}: {twice!r} is named twice")
    return names


def _count(text: str, flag: str, least: int) -> int:
    if not text.isdigit() or int(text) < least:
        raise UserError(f"{flag}: {text!r} is not a whole number ≥ {least}")
    return int(text)


def _source(source: str, cal) -> tuple[str, str, str, bool]:
    """(label, dataset, split, chat) of one CALIB entry."""
    if source in (DEFAULT, chat_docs.NAME):
        return source, source, "calibration", source == chat_docs.NAME
    path = Path(source).expanduser()
    if path.suffix or path.exists() or source.startswith((".", "/", "~")):
        return path.stem, source, cal.split, _is_chat_file(path)
    hub, _, split = source.partition(":")
    return hub.replace("/", "--"), hub, split or cal.split, cal.chat_template


def _is_chat_file(path: Path) -> bool:
    """A JSONL file whose first row holds `messages` and no `text`: conversations."""
    import json

    if path.suffix not in (".jsonl", ".json") or not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    return False  # check_source names the line
                return isinstance(row, dict) and "messages" in row and "text" not in row
    return False
