"""Eval stage: perplexity, KL divergence and top-token agreement against the original model.

    python -m pipeline eval --model tiny-llama --recipe gptq     # = make eval RECIPE=gptq

Two splits: `heldout` (recipe eval.dataset, text the quantizer never saw) and `calibration`
(the recipe's calibration source: drift on data it did see). The original's outputs come from
a cached compact reference (pipeline/reference.py); only the quantized model runs each time.
Results: runs/<model>/<recipe>/eval/results.json and the manifest's "eval" entry; the
per-token values in eval/tokens.pt, for paired comparisons between recipes.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline import data, drift, environment, reference, tasks
from pipeline.errors import UserError
from pipeline.fsutil import staging_dir, write_json_atomic
from pipeline.recipe import EvalSettings
from pipeline.runner import run_in_rundir
from pipeline.stages import quantize

STAGE = "eval"
FOLDER = "eval"
SPLITS = ("heldout", "calibration")
TOKENS = "tokens.pt"
LIBRARIES = ("transformers", "torch", "compressed-tensors", "lm_eval")


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
    """Backend "auto": vLLM where the serving env exists and can run the scheme (and the KV-cache
    dtype), else hf. hf measures an FP8 KV cache by compressed-tensors' emulation, which needs
    the artifact's calibrated kv_cache_scheme."""
    from pipeline.backends import vllm

    settings = qjob.recipe.spec.eval
    kv = settings.kv_cache_dtype
    chosen = backend or settings.backend
    scheme = qjob.recipe.scheme()
    if chosen == "auto":
        usable = vllm.available() and (
            not (scheme and scheme.weight_bits == 4) or vllm.capabilities()["w4a16"]
        )
        if usable and kv != "auto":
            usable = vllm.capabilities()["fp8_kv_cache"]
        chosen = "vllm" if usable else "hf"
    elif chosen == "vllm":
        if not vllm.available():
            raise UserError("eval backend vllm needs the serving env (.venv-serve): make setup")
        vllm.require_scheme(scheme, "run", "; use --backend hf")
        vllm.require_kv_cache(kv, "evaluate", "; --backend hf emulates a calibrated FP8 KV cache")
    if chosen == "hf" and kv != "auto" and not qjob.recipe.kv_cache_scheme():
        raise UserError(
            f"eval.kv_cache_dtype {kv} with the hf backend needs the recipe's kv_cache_scheme "
            "(calibrated scales to emulate); use the vllm backend or add a kv_cache_scheme"
        )
    return EvalJob(quantize=qjob, settings=settings, backend=chosen)


def _backend(name: str):
    from pipeline.backends import hf, vllm

    return {"hf": hf, "vllm": vllm}[name]


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
        split: reference.key(job.quantize.model_identity, w, s, job.backend)
        for split, w in windows.items()
    }
    inputs = {
        "quantize_fingerprint": qentry["fingerprint"],  # the artifact being evaluated
        # gates and recovery thresholds are checked afresh on cached results: not inputs
        "settings": s.model_dump(
            exclude={"gates": True, "tasks": {"__all__": {"recovery_threshold"}}}
        ),
        "local_tasks": tasks.local_tasks_fingerprint() if s.tasks else None,
        "backend": job.backend,
        "references": keys,
        "libraries": environment.library_versions(LIBRARIES),
    }
    outputs = {"results": f"{FOLDER}/results.json", "tokens": f"{FOLDER}/{TOKENS}"}
    return run_in_rundir(
        job.quantize, STAGE, inputs, outputs, lambda: _evaluate(job, windows, keys), force
    )


def _evaluate(job: EvalJob, windows: dict, keys: dict) -> dict:
    backend = _backend(job.backend)
    s = job.settings
    splits = list(windows)
    names = {split: f"{split}-{keys[split]}" for split in splits}
    with reference.lock(job.reference_dir):
        refs = {split: reference.load(job.reference_dir, names[split]) for split in splits}
        missing = [split for split in splits if refs[split] is None]
        if missing:
            original = backend.load(job.quantize.model_path)
            built = reference.compute(backend, original, [windows[x] for x in missing], s)
            del original
            for split, ref in zip(missing, built, strict=True):
                reference.save(job.reference_dir, names[split], ref)
                refs[split] = ref
    model = backend.load(job.quantize.rundir.path / quantize.ARTIFACT, s.kv_cache_dtype)
    tokens = _score(backend, model, [windows[x] for x in splits], [refs[x] for x in splits])
    described = backend.describe(model)
    del model  # lm-eval loads its own copy
    summary = {}
    for split, toks in zip(splits, tokens, strict=True):
        summary[split] = {
            **drift.summarize(toks),
            "windows": len(windows[split]),
            "context_length": s.context_length,
            "reference_bytes_per_token": reference.bytes_per_token(refs[split]),
            "reference": {"key": keys[split], **drift.coverage(refs[split])},
            "reference_cached": split not in missing,
        }
    results = {
        "model": job.quantize.ref.name,
        "recipe": job.quantize.recipe.name,
        **described,
        "reference_mass": s.reference_mass,
        "splits": summary,
        "tasks": _tasks(job) if s.tasks else [],
    }
    results["gates"] = check_gates(s, summary["heldout"], results["tasks"])
    with staging_dir(job.folder) as tmp:
        write_json_atomic(tmp / "results.json", results)
        # per-token values: paired comparisons between recipes scored on the same tokens
        torch.save(
            {split: _kept(toks) for split, toks in zip(splits, tokens, strict=True)}, tmp / TOKENS
        )
    return {
        "splits": summary,
        "tasks": results["tasks"],
        "gates": results["gates"],
        "backend": job.backend,
    }


def _tasks(job: EvalJob) -> list[dict]:
    s, q = job.settings, job.quantize
    with reference.lock(job.reference_dir):
        original, cached = tasks.original_scores(
            job.reference_dir, q.model_identity, q.model_path, job.backend, s.tasks
        )
    artifact = q.rundir.path / quantize.ARTIFACT
    quantized = tasks.scores(artifact, job.backend, s.tasks, "quantized", s.kv_cache_dtype)
    return [
        {**row, "original_cached": cached} for row in tasks.compare(s.tasks, original, quantized)
    ]


def _kept(tokens: dict) -> dict:
    return {
        "kl": tokens["kl"].float(),
        "same_top": tokens["same_top"],
        "logq_target": tokens["logq_target"].float(),
    }


def load_tokens(job: EvalJob) -> dict[str, dict]:
    """{split: {kl, same_top, logq_target}} per scored token, in reference order."""
    return torch.load(job.folder / TOKENS)


def _score(backend, model, groups: list, refs: list[dict]) -> list[dict]:
    """Per-token drift of `model` against each group's reference, in one backend call."""
    parts: list[list[dict]] = [[] for _ in groups]
    offsets = [0] * len(groups)
    for g, i, logq in reference.stream(backend, model, groups, "eval (quantized model)"):
        n = logq.shape[0]
        piece = drift.rows(refs[g], offsets[g], offsets[g] + n)
        parts[g].append(drift.per_token(piece, logq, groups[g][i, 1:]))
        offsets[g] += n
    return [drift.concat(p) for p in parts]


def check_gates(settings: EvalSettings, heldout: dict, task_rows: list[dict] = ()) -> dict:
    """Pass/fail against the settings as they are now (thresholds are not cached inputs)."""
    g = settings.gates
    at_least, at_most = (lambda v, lim: v >= lim), (lambda v, lim: v <= lim)
    checks = [
        ("max_ppl_ratio", g.max_ppl_ratio, heldout["ppl_ratio"], at_most),
        ("max_mean_kl", g.max_mean_kl, heldout["kl_mean"], at_most),
        ("min_same_top_pct", g.min_same_top_pct, heldout["same_top_pct"], at_least),
    ]
    thresholds = {t.task: t.recovery_threshold for t in settings.tasks}
    for row in task_rows:
        limit = thresholds.get(row["task"])
        value = row["recovery"] if row["recovery"] is not None else 0.0
        checks.append((f"{row['task']} recovery", limit, value, at_least))
    results = [
        {"gate": name, "limit": limit, "value": value, "passed": ok(value, limit)}
        for name, limit, value, ok in checks
        if limit is not None
    ]
    return {"passed": all(r["passed"] for r in results), "checks": results}


def load_results(job: EvalJob) -> dict:
    return json.loads((job.folder / "results.json").read_text())
