"""Eval stage: perplexity, KL divergence and top-token agreement against the original model.

    python -m pipeline eval --model tiny-llama --recipe gptq     # = make eval RECIPE=gptq

Two splits: `heldout` (recipe eval.dataset, text the quantizer never saw) and `calibration`
(the recipe's calibration source: drift on data it did see). The original's outputs come from
a cached compact reference (pipeline/eval/reference.py); only the quantized model runs each time.
Results: runs/<model>/<recipe>/eval/<fingerprint>/results.json (pipeline/eval/results.py) and the
manifest's "eval" entry; per-token values in tokens.pt beside it, for paired comparisons between
recipes. Each backend and settings keep their own result. Beside each drift figure, its noise
floor (pipeline/eval/floor.py): the original against itself at another batch size; lm-eval
tasks are paired item by item (pipeline/eval/paired_tasks.py), with a floor of their own.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.artifact import AfterQuantize, Artifact
from pipeline.config.engine_name import BACKEND, ENGINE
from pipeline.config.recipe import EvalSettings
from pipeline.core import devices, environment, quiet
from pipeline.core.errors import NotOnThisHost, UserError
from pipeline.core.files import write_json_atomic
from pipeline.core.rundir import StageEntry
from pipeline.core.stage import Verdict
from pipeline.data import texts
from pipeline.eval import (
    answers,
    backend_choice,
    floor,
    generation,
    prompt_set,
    reference_key,
    tasks,
)
from pipeline.eval import plan as eval_plan
from pipeline.eval import policy as eval_policy
from pipeline.eval import results as eval_results
from pipeline.eval.gates import check_gates
from pipeline.eval.originals import SPLITS, Originals
from pipeline.eval.results import EvalResults
from pipeline.perf import host, timing

# Deferred imports: the backends, drift and reference import torch: torch loads only when there is
# scoring to do (a cached eval answers in under a second)

TOKENS = "tokens.pt"
LIBRARIES = ("transformers", "torch", "compressed-tensors", "lm_eval")


@dataclass
class EvalStage(AfterQuantize):
    quantize: Artifact
    settings: EvalSettings
    backend: str
    backend_reason: str | None = None  # why "auto" chose it
    _load_seconds = 0.0  # not a field: the time work() spent loading models, set as it loads
    _load_cpu_seconds = 0.0  # and this process's CPU time in it
    name: ClassVar[str] = "eval"
    folder: ClassVar[str] = "eval"
    _windows: dict = field(default_factory=dict, repr=False, init=False)
    _keys: dict = field(default_factory=dict, repr=False, init=False)

    @property
    def starts_engine(self) -> bool:
        return self.backend == BACKEND

    def verdict(self, entry: StageEntry) -> Verdict | None:
        gates = self.load_results(entry).gates
        if not (checks := gates.failed()):
            return None
        if gates.inconclusive_only():  # not failed: undecided (exit 3 too)
            return Verdict("gate_inconclusive", "; ".join(c.message or c.gate for c in checks))
        names = ", ".join(f"{c.gate} ({c.value:.4g} vs {c.limit:g})" for c in checks)
        return Verdict("gate_failed", f"eval gate failed: {names}")

    @property
    def _original_folder(self) -> Path:
        if (path := self.quantize.model_path) is None:  # the artifact's load_inputs sets it
            raise RuntimeError("the original model's files are not materialized yet")
        return path

    @property
    def reference_dir(self) -> Path:
        return self.rundir.original / "reference"

    @classmethod
    def prepare(cls, q: Artifact, backend: str | None = None) -> "EvalStage":
        """Every input checked and the backend chosen (eval/backend_choice.py: the one its
        dry-run plan shows); nothing loaded."""
        settings = eval_policy.settings(q)  # the recipe's, tiny-llama's answers capped
        texts.check_source(settings.dataset, settings.split, settings.text_column, "eval data")
        prompt_set.check(settings.generation)
        choice = backend_choice.choose(q, backend, settings)
        return cls(quantize=q, settings=settings, backend=choice.backend,
                   backend_reason=choice.reason)  # fmt: skip

    def split_texts(self, split: str, tokenizer) -> list[str]:
        """A split's texts; a chat calibration set's conversations rendered with the model's
        chat template, as the quantize calibrated on them."""
        s = self.settings
        if split == "heldout":
            return texts.load_all(s.dataset, s.config_name, s.split, s.text_column)
        cal = self.quantize.calibration
        if cal.chat_template:
            return texts.load_all(cal.dataset, cal.config_name, cal.split, "messages", tokenizer)
        return texts.load_all(cal.dataset, cal.config_name, cal.split, cal.text_column)

    def _tokenize(self) -> None:
        """Token windows of both splits (transformers and torch: seconds of imports, so only
        when the stage works or its window fingerprints are not remembered yet)."""
        from transformers import AutoTokenizer

        from pipeline.eval import windows

        tokenizer = AutoTokenizer.from_pretrained(self._original_folder)
        s = self.settings
        prints = {}
        for split in SPLITS:
            w = windows.windows(tokenizer, self.split_texts(split, tokenizer), s.context_length,
                                s.max_tokens)  # fmt: skip
            if len(w) == 0:
                raise UserError(
                    f"eval split {split}: not enough text for one {s.context_length}-token window"
                )
            self._windows[split] = w
            prints[split] = windows.fingerprint(w)
        reference_key.remember(self._window_source(), prints)
        self._set_keys(prints)

    @property
    def originals(self) -> Originals:
        """The original's side: what of it this eval stores and finds again."""
        q = self.quantize
        return Originals(q.model_identity, self.settings, q.calibration, self.backend,
                         self.reference_dir)  # fmt: skip

    def _window_source(self) -> list:
        return self.originals.window_source()

    def _set_keys(self, prints: dict) -> None:
        self._keys = self.originals.keys(prints)

    def inputs(self) -> dict:
        if not self._keys:
            remembered = reference_key.recall(self._window_source())
            if remembered:
                self._set_keys(remembered)
            else:
                self._tokenize()
        s = self.settings
        return {
            "quantize_fingerprint": self.quantize.entry().fingerprint,  # the artifact evaluated
            # gates and their thresholds are checked afresh on cached results: not inputs
            "settings": s.model_dump(
                exclude={
                    "gates": True,
                    "tasks": {"__all__": {"recovery_threshold", "max_drop"}},
                    "generation": answers.GATE_FIELDS,
                }  # fmt: skip
            ),
            "prompts": prompt_set.sha(s.generation) if s.generation.enabled else None,
            "answers_format": answers.FORMAT if s.generation.enabled else None,
            "local_tasks": tasks.local_tasks_fingerprint() if s.tasks else None,
            "tasks_format": tasks.FORMAT if s.tasks else None,  # per-item results and floor
            "floor": [floor.FLOOR_BATCH, tasks.FLOOR_BATCH, answers.BATCH, answers.FLOOR_BATCH],
            "backend": self.backend,
            "references": self._keys,
            "libraries": environment.library_versions(LIBRARIES),
        }

    def before_work(self) -> None:
        if self.backend == "hf":  # torch in this process: it must see the GPUs listed
            devices.check_torch()
        reload = self.quantize.entry().metrics.get("reload") or {}
        if (
            self.backend == "hf"
            and reload.get("transformers") is False
            and not reload.get("hf_view")
        ):
            raise NotOnThisHost(
                f"eval backend hf: {reload['reason']}: evaluate with --backend {BACKEND} where "
                f"{ENGINE} runs this scheme (a GPU does)"
            )

    def outputs(self, folder: str) -> dict[str, str]:
        return {"results": f"{folder}/results.json", "tokens": f"{folder}/{TOKENS}"}

    @property
    def log(self) -> Path:
        """Where transformers', compressed-tensors' and lm-eval's lines and bars go."""
        return self.rundir.path / "logs" / "eval.log"

    def work(self, out: Path) -> dict:
        with quiet.to_log(self.log), quiet.library_output(self.log):
            return self._work(out)

    def _work(self, out: Path) -> dict:
        import torch

        from pipeline.eval import drift, reference

        started, cpu_started = time.monotonic(), time.process_time()
        self._load_seconds = self._load_cpu_seconds = 0.0
        if not self._windows:
            self._tokenize()
        backend = _backend(self.backend)
        s, splits = self.settings, list(self._windows)
        prompts = self._prompts() if s.generation.enabled else None
        setup_seconds = time.monotonic() - started  # the windows and prompts: no model yet
        refs, missing, drift_floor, originals = self._references(backend, prompts)
        artifact = self.quantize.artifact_for(self.backend)
        online = (
            {"quantization": self.quantize.recipe.online} if self.quantize.recipe.online else {}
        )
        model = self._load(backend, artifact, s.kv_cache_dtype, **online)
        groups = [self._windows[x] for x in splits]
        per_token = _score(backend, model, groups, [refs[x] for x in splits])
        described = backend.describe(model)
        generated = self._generation(backend, model, prompts, originals) if prompts else None
        tasks_started = time.monotonic()
        # hf: lm-eval scores this very model object; then it goes before the original loads
        quantized_scores = self._quantized_scores(model) if s.tasks else None
        artifact_tasks_seconds = time.monotonic() - tasks_started if s.tasks else 0.0
        del model
        _release_memory()  # before the original loads for its task scores
        summary = {}
        for split, toks in zip(splits, per_token, strict=True):
            summary[split] = {
                **drift.summarize(toks),
                "windows": len(self._windows[split]),
                "context_length": s.context_length,
                "reference_bytes_per_token": reference.bytes_per_token(refs[split]),
                "reference": {"key": self._keys[split], **drift.coverage(refs[split])},
                "reference_cached": split not in missing,
            }
        summary["heldout"]["floor"] = drift_floor
        task_rows = self._tasks(quantized_scores) if quantized_scores is not None else []
        tasks_seconds = time.monotonic() - tasks_started if s.tasks else 0.0
        made_now = eval_plan.Work(
            s.context_length,
            sum(len(w) for w in self._windows.values()),
            sum(len(self._windows[x]) for x in missing),
            0 if drift_floor["cached"] else len(self._windows["heldout"]),
            tuple(len(ids) for ids in prompts["ids"]) if prompts else (),
            s.generation.max_new_tokens,
            not originals["cached"],
        )
        cpu = time.process_time() - cpu_started
        self._record_overheads(time.monotonic() - started, setup_seconds,
                               (tasks_seconds, artifact_tasks_seconds), made_now, cpu)  # fmt: skip
        results = EvalResults(
            model=self.quantize.ref.name,
            recipe=self.quantize.recipe.name,
            **described,
            reference_mass=s.reference_mass,
            splits=summary,
            tasks=task_rows,
            generation=generated,
            gates=check_gates(s, summary["heldout"], task_rows, generated),
            settings=s.model_dump(),
        )
        write_json_atomic(out / "results.json", results.model_dump(mode="json"))
        # per-token values: paired comparisons between recipes scored on the same tokens
        torch.save(
            {split: _kept(t) for split, t in zip(splits, per_token, strict=True)}, out / TOKENS
        )
        h = results.heldout
        return {
            "backend": self.backend,
            "kl_mean": h.kl_mean,
            "ppl_ratio": h.ppl_ratio,
            "same_top_pct": h.same_top_pct,
            "gates_passed": results.gates.passed,
            "kl_mean_floor": h.floor.kl_mean if h.floor else None,
            "same_top_pct_floor": h.floor.same_top_pct if h.floor else None,
            "tasks": {t.task: _paired_metrics(t) for t in results.tasks},
            "generation": _generation_metrics(results.generation),
            "load_seconds": round(self._load_seconds, 2),  # the time estimate leaves it out
            # CPU time: what the work took on its threads, however busy the host was beside it
            "cpu_seconds": round(time.process_time() - cpu_started, 2),
            "load_cpu_seconds": round(self._load_cpu_seconds, 2),
        }

    def _load(self, backend, *args, **kwargs):
        """backend.load, timed: loading is in no time estimate (it scales with what the disk,
        the page cache and the loader do, not with the bound), so it is measured apart."""
        started, cpu_started = time.monotonic(), time.process_time()
        try:
            return backend.load(*args, **kwargs)
        finally:
            self._load_seconds += time.monotonic() - started
            self._load_cpu_seconds += time.process_time() - cpu_started

    def _record_overheads(
        self,
        seconds: float,
        setup_seconds: float,
        tasks: tuple[float, float],
        work: eval_plan.Work,
        cpu_seconds: float,
    ) -> None:
        """What this eval took beyond the bound of the work it did (eval_plan.Work: what of the
        original was built now counts, what was cached does not), as the chain plan's next
        estimate takes it (pipeline/perf/timing.py): its setup, and the rest a forward (a
        batch's scoring, an answer's step: python and dispatch, which a small model's thousand
        decode steps are made of and a large model's thirty are not). On a CPU the times are
        taken at the share of the wall clock its threads had (their CPU time over the threads),
        as on a quiet host: the overheads a busy host's eval would leave for the next plan to
        read were the other processes' turns."""
        hw = host.here()
        if hw is None:
            return
        tasks_seconds, artifact_tasks_seconds = tasks  # lm-eval's: all of it, the artifact's
        share = 1.0
        worked = seconds - self._load_seconds
        if eval_plan.hf_on_cpu(self.backend, hw) and worked > 0:
            used, _ = host.threads()
            share = min(1.0, (cpu_seconds - self._load_cpu_seconds) / used / worked)
        setup_seconds, tasks_seconds = setup_seconds * share, tasks_seconds * share
        artifact_tasks_seconds *= share
        q = self.quantize
        bounded = eval_plan.work_seconds(q.geometry, q.recipe, work, hw, self.backend)
        rest = worked * share - setup_seconds - tasks_seconds - bounded
        key = f"eval-{self.backend}"
        kept = {"tasks_seconds": tasks_seconds, "artifact_tasks_seconds": artifact_tasks_seconds}
        if not tasks_seconds:  # no lm-eval tasks this time: keep the last run's that had some
            last = timing.observed(key) or {}
            kept = {name: last.get(name, 0.0) for name in kept}
        measured = {"seconds": setup_seconds,
                    "step_seconds": max(0.0, rest) / max(1, eval_plan.forwards(work)),
                    "model": q.ref.name} | kept  # fmt: skip
        timing.record(key, measured)  # the newest, for a model never evaluated here
        timing.record(f"{key}:{q.ref.name}", measured)  # this model's own: its layers, vocab

    def _references(self, backend, prompts: dict | None) -> tuple[dict, list[str], dict, dict]:
        """(references, the splits built now, the held-out noise floor, the original's answers
        by batch size): the original loads once for whichever of them is not cached."""
        from pipeline.eval import reference

        names = Originals.reference_names(self._keys)
        folder, heldout_key = self.reference_dir, self._keys["heldout"]
        with reference_key.lock(folder, names):
            refs = {split: reference.load(folder, names[split]) for split in names}
            missing = [split for split in names if refs[split] is None]
            drift_floor = floor.load(folder, heldout_key)
            floor_cached = drift_floor is not None
            made = {b: answers.load(folder, n) for b, n in self.originals.answer_names().items()}
            answers_cached = None not in made.values()
            if missing or not floor_cached or None in made.values():
                original = self._load(backend, self._original_folder)
                if missing:  # else only the floor or the answers are new
                    groups = [self._windows[x] for x in missing]
                    built = reference.compute(backend, original, groups, self.settings)
                    for split, ref in zip(missing, built, strict=True):
                        reference.save(folder, names[split], ref)
                        refs[split] = ref
                if not floor_cached:
                    heldout = refs["heldout"]
                    assert heldout is not None  # stored, or built just above
                    drift_floor = floor.compute(backend, original, self._windows["heldout"],
                                                heldout, heldout_key, folder)  # fmt: skip
                made = self._original_answers(backend, original, prompts, made)
                del original
        assert drift_floor is not None  # stored, or computed just above
        return (
            refs,
            missing,
            {**drift_floor, "cached": floor_cached},
            made | {"cached": answers_cached},
        )

    def _original_answers(self, backend, original, prompts: dict | None, made: dict) -> dict:
        """The original's answers at each batch size not cached yet, saved beside the
        reference."""
        names = self.originals.answer_names()
        needed = [batch for batch, found in made.items() if found is None]
        if needed:
            assert prompts is not None  # answers are named only where generation is on
            runs = answers.make(backend, original, prompts["ids"], self.settings.generation,
                                needed, prompts["pad"], "original")  # fmt: skip
            for batch, run in zip(needed, runs, strict=True):
                answers.save(self.reference_dir, names[batch], run)
                made[batch] = run
        return made

    def _prompts(self) -> dict:
        """The generation prompts as token ids, with the ids that end an answer: the
        tokenizer's EOS and the generation config's, and a reasoning model's `</think>`."""
        from transformers import AutoTokenizer, GenerationConfig

        path = self._original_folder
        tokenizer = AutoTokenizer.from_pretrained(path)
        g = self.settings.generation
        ids = prompt_set.render(tokenizer, prompt_set.load(g), g.chat_template)
        eos = {tokenizer.eos_token_id} - {None}
        if (Path(path) / "generation_config.json").is_file():
            configured = GenerationConfig.from_pretrained(path).eos_token_id
            eos |= set(configured if isinstance(configured, list) else [configured]) - {None}
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos, default=0)
        think_end = tokenizer.get_vocab().get(generation.THINK_END)
        return {"ids": ids, "eos": eos, "pad": pad, "think_end": think_end}

    def _generation(self, backend, model, prompts: dict, originals: dict) -> dict:
        """The quantized model's answers against the original's, with the floor."""
        g = self.settings.generation
        (made,) = answers.make(backend, model, prompts["ids"], g, [answers.BATCH],
                               prompts["pad"], "quantized")  # fmt: skip
        drift = answers.drift(originals[answers.BATCH], originals[answers.FLOOR_BATCH], made,
                              prompts["eos"], prompts["think_end"], g)  # fmt: skip
        return drift | {"original_cached": originals["cached"]}

    def _quantized_scores(self, model) -> dict:
        s, q = self.settings, self.quantize
        return tasks.scores(
            q.artifact_for(self.backend),
            self.backend,
            s.tasks,
            "quantized",
            s.kv_cache_dtype,
            q.recipe.online,
            loaded=model if self.backend == "hf" else None,  # vLLM: the serving env's engine
            log=self.log,
        )

    def _tasks(self, quantized: dict) -> list[dict]:
        s, q = self.settings, self.quantize
        with reference_key.lock(self.reference_dir, ["tasks", s.model_dump()["tasks"]]):
            args = (self.reference_dir, q.model_identity, self._original_folder, self.backend,
                    s.tasks)  # fmt: skip
            original, cached = tasks.original_scores(*args, self.log)
            task_floor, floor_cached = tasks.original_scores(*args, self.log, tasks.FLOOR_BATCH)
        rows = tasks.compare(s.tasks, original, quantized, task_floor)
        return [{**row, "original_cached": cached, "floor_cached": floor_cached} for row in rows]

    def load_results(self, entry: StageEntry) -> EvalResults:
        """The entry's results, with the gates re-checked against the recipe as it is now:
        editing a gate needs no re-evaluation."""
        return eval_results.load(self.rundir.path / entry.outputs["results"], self.settings)


def _release_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _backend(name: str):
    from pipeline.engines import eval_backend
    from pipeline.eval.backends import hf

    return {"hf": hf, BACKEND: eval_backend}[name]


def _paired_metrics(row) -> dict:
    """A task's paired figures for the manifest and `--json`."""
    p, f = row.paired, row.floor
    keep = ("change", "change_low", "change_high", "confidence", "right_to_wrong",
            "wrong_to_right", "mcnemar_p", "items")  # fmt: skip
    out = {k: getattr(p, k) for k in keep} if p else {}
    return out | {"floor_flips": f.flips if f else None, "recovery": row.recovery}


def _generation_metrics(drift) -> dict | None:
    """The generation drift's headline figures for the manifest and `--json`."""
    if drift is None:
        return None
    keep = ("length_ratio", "length_ratio_low", "length_ratio_high", "mean_tokens_original",
            "mean_tokens_quantized", "eos_rate_quantized", "truncated_rate_quantized",
            "identical", "prompts")  # fmt: skip
    return {k: getattr(drift, k) for k in keep} | {
        "length_ratio_floor": drift.floor.length_ratio,
        "identical_floor": drift.floor.identical,
    }


def _kept(tokens: dict) -> dict:
    return {
        "kl": tokens["kl"].float(),
        "same_top": tokens["same_top"],
        "logq_target": tokens["logq_target"].float(),
    }


def _score(backend, model, groups: list, refs: list[dict]) -> list[dict]:
    """Per-token drift of `model` against each group's reference, in one backend call."""
    from pipeline.eval import drift, reference

    parts: list[list[dict]] = [[] for _ in groups]
    offsets = [0] * len(groups)
    for g, i, logq in reference.stream(backend, model, groups, "eval (quantized model)"):
        n = logq.shape[0]
        piece = drift.rows(refs[g], offsets[g], offsets[g] + n)
        parts[g].append(drift.per_token(piece, logq, groups[g][i, 1:]))
        offsets[g] += n
    return [drift.concat(p) for p in parts]
