"""The chosen formats as a non-uniform llm-compressor recipe: one config group per format,
targeting its groups' modules by regex; 16-bit groups join the ignore list. GPTQ rounds the
quantized ones (the search decides where the bits go, GPTQ how they are spent)."""

import datetime as dt
from pathlib import Path

import yaml

from pipeline.config import recipe
from pipeline.core.files import write_text_atomic
from pipeline.search.groups import Group
from pipeline.search.sensitivity import CANDIDATES

BASE = "gptq"  # calibration, eval gates and serve settings come from this shipped recipe


def recipe_text(title: str, header: str, groups: list[Group], chosen: list[str]) -> str:
    base = yaml.safe_load(recipe.load(BASE).text)  # as written, without the defaults
    config_groups, ignore = {}, ["lm_head"]
    for name, scheme in CANDIDATES.items():
        targets = [g.target for g, c in zip(groups, chosen, strict=True) if c == name]
        if not targets:
            continue
        if scheme is None:
            ignore += targets
            continue
        config_groups[name.lower()] = {
            "targets": targets,
            "weights": {
                "num_bits": scheme.weight_bits,
                "type": scheme.weight_type,
                "symmetric": scheme.symmetric,
                "strategy": "group",
                "group_size": scheme.group_size,
            },
        }
    modifier = {"ignore": ignore, "dampening_frac": 0.01, "config_groups": config_groups}
    body = {
        "description": title,
        "quantization": {"quant_stage": {"quant_modifiers": {"GPTQModifier": modifier}}},
        "calibration": base["calibration"],
        "eval": {k: v for k, v in base["eval"].items() if k != "tasks"},
        "serve": base["serve"],
    }
    stamp = dt.date.today().isoformat()
    comment = "".join(f"# {line}\n" for line in [f"{header} ({stamp})", *_legend(groups, chosen)])
    return comment + yaml.safe_dump(body, sort_keys=False, width=1000)


def _legend(groups: list[Group], chosen: list[str]) -> list[str]:
    counts = {name: sum(1 for c in chosen if c == name) for name in CANDIDATES}
    return [", ".join(f"{n} groups {name}" for name, n in counts.items() if n)]


def write(path: Path, text: str) -> None:
    """Atomically, and only when it changed (a cached search rewrites the same text)."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
