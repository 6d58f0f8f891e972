"""The search stage: sensitivities and the chosen formats, cached in runs/<model>/search-<bits>/
like any stage (same model, budget, candidates, token set and libraries: reused)."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.config.recipe import EvalSettings
from pipeline.core import environment
from pipeline.core.errors import UserError
from pipeline.core.files import staging_dir, write_json_atomic
from pipeline.core.rundir import RunDir, StageEntry
from pipeline.core.runs import Runs
from pipeline.data.texts import load_all
from pipeline.models import aliases
from pipeline.search import groups as layer_groups
from pipeline.search import select
from pipeline.search.sensitivity import CANDIDATES, group_bits, measure

# Deferred imports: the hf backend and windows import torch, needed only when the search works (not
# when cached)

LIBRARIES = ("compressed-tensors", "transformers", "torch")
CONTEXT = 512  # tokens per window of the sensitivity token set
SEED = 0  # of the random control
METHOD = 1  # bumped when the measurement or the selection changes meaning


def run_name(target_bits: float) -> str:
    return f"search-{target_bits:g}"


@dataclass
class SearchStage:
    ref: aliases.ModelRef
    target_bits: float
    tokens: int
    rundir: RunDir
    model_path: Path | None = field(default=None, init=False)  # once inputs() has run
    model_identity: dict = field(default_factory=dict, init=False)
    name: ClassVar[str] = "search"
    folder: ClassVar[str] = "search"
    starts_engine: ClassVar[bool] = False  # the search scores on the hf backend
    staging = staticmethod(staging_dir)  # not a field: where work writes, renamed when done

    @classmethod
    def prepare(
        cls, ref: aliases.ModelRef, target_bits: float, tokens: int, runs: Runs
    ) -> "SearchStage":
        # every candidate is grouped: one 16-bit scale per group_size weights
        fewest = min(
            s.weight_bits + 16 / s.group_size for s in CANDIDATES.values() if s and s.group_size
        )
        if not fewest < target_bits < 16:
            raise UserError(
                f"--target-bits {target_bits:g}: choose between {fewest:g} (every group "
                f"{next(iter(CANDIDATES))}, scales included) and 16 (the original)"
            )
        if tokens < CONTEXT:
            raise UserError(f"--tokens {tokens}: at least {CONTEXT} (one window)")
        runs.pull_run(ref.name, run_name(target_bits))
        rundir = RunDir(ref.name, run_name(target_bits), runs)
        rundir.check_writable()
        return cls(ref, target_bits, tokens, rundir)

    @property
    def header(self) -> dict:
        return {"model": aliases.header(self.ref, self.model_identity)}

    def inputs(self) -> dict:
        if self.model_path is None:
            self.model_path, self.model_identity = aliases.materialize(self.ref)
        return {
            "model": self.model_identity,
            "target_bits": self.target_bits,
            "candidates": list(CANDIDATES),
            "tokens": {"dataset": "python-docs", "split": "calibration", "count": self.tokens},
            "context": CONTEXT,
            "seed": SEED,
            "method": METHOD,
            "libraries": environment.library_versions(LIBRARIES),
        }

    def verdict(self, entry: StageEntry) -> None:
        """No gates: the search's results are sensitivities, not a release question."""
        return None

    def before_work(self) -> None:
        pass

    def outputs(self, folder: str) -> dict[str, str]:
        return {"results": f"{folder}/sensitivity.json"}

    def work(self, out: Path) -> dict:
        from transformers import AutoTokenizer

        from pipeline.eval.backends import hf
        from pipeline.eval.windows import windows

        if self.model_path is None:  # execute calls inputs(), which materializes it, first
            raise RuntimeError(f"search {self.ref.name}: work before inputs()")
        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        texts = load_all("python-docs", None, "calibration", "text")
        win = windows(tokenizer, texts, CONTEXT, self.tokens)
        model = hf.load(self.model_path)
        found = layer_groups.of_model(model)
        if not found:
            raise UserError(f"{self.ref.name}: no decoder-layer Linear modules to search")
        settings = EvalSettings()
        kl = measure(hf, model, found, win, settings.reference_mass, settings.reference_max_k)
        names = list(CANDIDATES)
        bits = [[group_bits(g, CANDIDATES[n]) for n in names] for g in found]
        params = sum(g.params for g in found)
        budget = self.target_bits * params
        chosen = select.cheapest([[row[n]["kl"] for n in names] for row in kl], bits, budget)
        control = select.random_fill(bits, budget, SEED)
        result = {
            "target_bits": self.target_bits,
            "params": params,
            "tokens": int(win[:, 1:].numel()),
            "candidates": names,
            "groups": [
                {
                    "name": g.name,
                    "members": list(g.members),
                    "params": g.params,
                    "bits": dict(zip(names, (b / g.params for b in bits[i]), strict=True)),
                    "kl": kl[i],
                    "chosen": names[chosen[i]],
                    "random": names[control[i]],
                }
                for i, g in enumerate(found)
            ],
        }
        for key, picks in (("search", chosen), ("random", control)):
            result[key] = {
                "bits_per_weight": sum(bits[i][c] for i, c in enumerate(picks)) / params,
                "predicted_kl": sum(kl[i][names[c]]["kl"] for i, c in enumerate(picks)),
            }
        write_json_atomic(out / "sensitivity.json", result)
        return {k: result[k] for k in ("search", "random", "tokens")} | {"groups": len(found)}

    def load_results(self, entry: StageEntry) -> dict:
        import json

        return json.loads((self.rundir.path / entry.outputs["results"]).read_text())
