"""Eval stage: perplexity, KL divergence and top-token agreement against the original model.

    python -m pipeline eval --model tiny-llama --recipe gptq     # = make eval RECIPE=gptq

Two splits: `heldout` (recipe eval.dataset, text the quantizer never saw) and `calibration`
(the recipe's calibration source: drift on data it did see). The original's outputs come from
a cached compact reference (pipeline/reference.py); only the quantized model runs each time.
Results: runs/<model>/<recipe>/eval/results.json and the manifest's "eval" entry.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline import data, drift, environment, reference
from pipeline.errors import UserError
from pipeline.fsutil import staging_dir, write_json_atomic
from pipeline.recipe import EvalSettings
from pipeline.runner import run_stage
from pipeline.stages import quantize

STAGE = "eval"
FOLDER = "eval"
SPLITS = ("heldout", "calibration")
LIBRARIES = ("transformers", "torch", "compressed-tensors")


@dataclass
class EvalJob:
    quantize: quantize.Job
    settings: EvalSettings
    backend: str

    @property
    def folder(self) -> Path:
        return self.quantize.rundir.path / FOLDER

    @property
    def reference_dir(self) -> Path:
        return self.quantize.rundir.path.parent / "original" / "reference"


def prepare(qjob: quantize.Job, backend: str | None = None) -> EvalJob:
    settings = qjob.recipe.spec.eval
    chosen = backend or settings.backend
    if chosen == "vllm":
        raise UserError("eval backend 'vllm' is not available yet; use --backend hf")
    return EvalJob(quantize=qjob, settings=settings, backend="hf")


def split_texts(job: EvalJob, split: str) -> list[str]:
    s = job.settings
    if split == "heldout":
        return data.load_all(s.dataset, s.config_name, s.split, s.text_column)
    cal = job.quantize.calibration
    return data.load_all(cal.dataset, cal.config_name, cal.split, cal.text_column)


def run(job: EvalJob, force: bool = False) -> tuple[dict, bool]:
    from transformers import AutoTokenizer

    from pipeline import eval_data

    qentry = job.quantize.rundir.stage(quantize.STAGE)
    tokenizer = AutoTokenizer.from_pretrained(job.quantize.model_path)
    s = job.settings
    windows = {}
    for split in SPLITS:
        w = eval_data.windows(tokenizer, split_texts(job, split), s.context_length, s.max_tokens)
        if len(w) == 0:
            raise UserError(
                f"eval split {split}: not enough text for one {s.context_length}-token window"
            )
        windows[split] = w
    keys = {
        split: reference.key(job.quantize.model_identity, w, s.top_k, job.backend)
        for split, w in windows.items()
    }
    inputs = {
        "quantize_fingerprint": qentry["fingerprint"],  # the artifact being evaluated
        "settings": s.model_dump(exclude={"gates"}),
        "backend": job.backend,
        "references": keys,
        "libraries": environment.library_versions(LIBRARIES),
    }
    with job.quantize.rundir.lock():
        return run_stage(
            job.quantize.rundir,
            job.quantize.header,
            STAGE,
            inputs,
            {"results": f"{FOLDER}/results.json"},
            lambda: _evaluate(job, windows, keys),
            force=force,
        )


def _evaluate(job: EvalJob, windows: dict, keys: dict) -> dict:
    from pipeline.backends import hf as backend

    s = job.settings
    refs, cached = {}, {}
    original = None
    for split, w in windows.items():

        def build(w=w, split=split):
            nonlocal original
            original = original or backend.load(job.quantize.model_path)
            return reference.compute(backend, original, w, s.top_k, f"reference {split}")

        refs[split], cached[split] = reference.load_or_build(
            job.reference_dir, f"{split}-{keys[split]}", build
        )
    del original
    model = backend.load(job.quantize.rundir.path / quantize.ARTIFACT)
    splits = {}
    for split, w in windows.items():
        tokens = _score(backend, model, w, refs[split], f"eval {split}")
        splits[split] = {
            **drift.summarize(tokens),
            "windows": len(w),
            "context_length": s.context_length,
            "reference_bytes_per_token": reference.bytes_per_token(refs[split]),
            "reference_cached": cached[split],
        }
    results = {
        "model": job.quantize.ref.name,
        "recipe": job.quantize.recipe.name,
        **backend.describe(model),
        "top_k": s.top_k,
        "splits": splits,
        "gates": check_gates(s, splits["heldout"]),
    }
    with staging_dir(job.folder) as tmp:
        write_json_atomic(tmp / "results.json", results)
    return {"splits": splits, "gates": results["gates"], "backend": job.backend}


def _score(backend, model, windows, ref, desc) -> dict:
    from pipeline import progress

    parts, start = [], 0
    targets = windows[:, 1:]
    bar = progress.bar(total=len(windows), desc=desc, unit="window")
    for i, logq in enumerate(backend.logprobs(model, windows)):
        n = logq.shape[0]
        piece = {k: v[start : start + n] for k, v in ref.items()}
        parts.append(drift.per_token(piece, logq, targets[i]))
        start += n
        bar.update()
    bar.close()
    return drift.concat(parts)


def check_gates(settings: EvalSettings, heldout: dict) -> dict:
    g = settings.gates
    checks = [
        ("max_ppl_ratio", g.max_ppl_ratio, heldout["ppl_ratio"], lambda v, lim: v <= lim),
        ("max_mean_kl", g.max_mean_kl, heldout["kl_mean"], lambda v, lim: v <= lim),
        ("min_same_top_pct", g.min_same_top_pct, heldout["same_top_pct"], lambda v, lim: v >= lim),
    ]
    results = [
        {"gate": name, "limit": limit, "value": value, "passed": ok(value, limit)}
        for name, limit, value, ok in checks
        if limit is not None
    ]
    return {"passed": all(r["passed"] for r in results), "checks": results}


def load_results(job: EvalJob) -> dict:
    return json.loads((job.folder / "results.json").read_text())
