"""lm-eval task scores of the original and the quantized model, and the recovery between them.

Runs pipeline/eval/task_scripts/run_lm_eval.py through lm-eval's Python API: lm-eval's `hf` model
in this process, on the very model object the drift scored (same loader, dtype and device: a
second loader once met a bf16 MoE router with float32 activations), or its `vllm` model as a
subprocess in the serving env (the eval backend decides, so the tasks run on the same kernels
as the drift).
Local tasks (a YAML and its data) live in evals/tasks/; hub tasks (arc_easy, gsm8k, …) work
where the hub is reachable.
The original's scores, with each item's result (lm-eval's log_samples), are cached per (model,
tasks, engine: backend, device, dtype, build) beside the drift reference; so is its noise floor:
the original scored again at FLOOR_BATCH, an equivalent setting whose only difference is the
padding and the order of the sums (pipeline/eval/paired_tasks.py pairs the items).
"""

import contextlib
import json
import tempfile
from pathlib import Path

from pipeline.config.engine_name import BACKEND
from pipeline.config.recipe import TaskSpec
from pipeline.core import procs, progress, quiet
from pipeline.core.errors import UserError
from pipeline.core.files import hash_folder, sha256_json, write_json_atomic
from pipeline.core.paths import TASKS_DIR
from pipeline.engines import engine_identity, serving_env
from pipeline.eval import paired_tasks

# Deferred imports: the backends import torch (and lm-eval's task script, its libraries): torch
# loads only when there is scoring to do (a cached eval answers in under a second)

SCRIPT = Path(__file__).resolve().parent / "task_scripts" / "run_lm_eval.py"
LM_EVAL_BATCH = 8
FLOOR_BATCH = 4  # the noise floor: half the batch (other padding, other sums; no more memory)
FORMAT = "items-v1"  # bump when the cached scores change shape: old ones are then ignored
MAX_MODEL_LEN = 4096  # vLLM's KV cache for long-context models; tasks rarely need more


def local_tasks_fingerprint() -> str:
    """Content of evals/tasks/: editing a local task or its data re-runs it."""
    return hash_folder(TASKS_DIR)[:16]


def key(model_identity: dict, tasks: list[TaskSpec], engine: dict) -> str:
    """engine: the backend with its device, dtype and build (engine_identity.identity)."""
    specs = [t.model_dump(exclude=GATE_FIELDS) for t in tasks]
    return sha256_json([FORMAT, model_identity, specs, engine, local_tasks_fingerprint()])[:16]


# checked afresh on cached results, never inputs of one (pipeline/eval/gates.py)
GATE_FIELDS = {"recovery_threshold", "max_drop", "confidence"}


def original_scores(
    cache_dir: Path,
    model_identity: dict,
    model_dir: Path,
    backend: str,
    tasks: list[TaskSpec],
    log: Path | None = None,
    batch: int = LM_EVAL_BATCH,
) -> tuple[dict, bool]:
    """(scores, cached): the original model's, computed once per model, tasks and engine (the
    backend, device, dtype and build); batch FLOOR_BATCH: its noise floor, cached beside."""
    name = key(model_identity, tasks, engine_identity.identity(backend))
    suffix = "" if batch == LM_EVAL_BATCH else f"-b{batch}"  # the floor's beside the scores
    path = cache_dir / f"tasks-{name}{suffix}.json"
    if path.is_file():
        return json.loads(path.read_text()), True
    label = "original" if batch == LM_EVAL_BATCH else f"original (noise floor, batch {batch})"
    result = scores(model_dir, backend, tasks, label, log=log, batch_size=batch)
    write_json_atomic(path, result)
    return result, False


def scores(
    model_dir: Path,
    backend: str,
    tasks: list[TaskSpec],
    label: str,
    kv_cache_dtype: str = "auto",
    quantization: str | None = None,
    loaded=None,
    log: Path | None = None,
    batch_size: int = LM_EVAL_BATCH,
) -> dict:
    """{task: {value, stderr, samples, items}} for each task's metric (items: each item's
    value by doc id, None where lm-eval logs no number per item), plus the lm-eval version and the
    dtype lm-eval scored. quantization: vLLM's online quantization of the model as it loads
    (vllm backend). hf: lm-eval scores `loaded` (the drift's own model object), else the model
    loaded the drift's way (backends/hf.py): never a second loader with other dtypes. `log`:
    where the libraries' lines go (the eval's log; a throwaway one when None)."""
    if log is None:
        with tempfile.TemporaryDirectory() as tmp:
            return scores(model_dir, backend, tasks, label, kv_cache_dtype, quantization,
                          loaded, Path(tmp, "lm_eval.log"), batch_size)  # fmt: skip
    if backend == "hf":
        model, model_args = "hf", {"tokenizer": str(model_dir), "add_bos_token": True}
    else:
        model, model_args = BACKEND, _engine_args(Path(model_dir), kv_cache_dtype)
    if quantization:
        model_args["quantization"] = quantization
    spec = {
        "model": model,
        "model_args": model_args,
        "tasks": [{"task": t.task, "num_fewshot": t.num_fewshot, "limit": t.limit} for t in tasks],
        "include_path": str(TASKS_DIR),
        "batch_size": batch_size,
    }
    names = ", ".join(t.task for t in tasks)
    print(f"lm-eval ({model}) on the {label} model: {names}", file=quiet.terminal(), flush=True)
    if backend == "hf":
        out = _in_process(spec, label, log, model_dir, loaded)
    else:
        out = _subprocess(spec, label)
        out["dtype"] = "bfloat16" + (f", online {quantization}" if quantization else "")
    result = {"lm_eval": out["lm_eval"], "dtype": out["dtype"], "tasks": {}}
    for t in tasks:
        metrics = out["results"].get(t.task, {})
        if f"{t.metric},none" not in metrics:
            have = sorted({k.split(",")[0] for k in metrics if "_stderr" not in k} - {"alias"})
            raise UserError(f"lm-eval task {t.task} has no metric '{t.metric}' (it has: {have})")
        stderr = metrics.get(f"{t.metric}_stderr,none")
        result["tasks"][t.task] = {
            "metric": t.metric,
            "value": metrics[f"{t.metric},none"],
            "stderr": stderr if isinstance(stderr, float) else None,
            "samples": out["n-samples"].get(t.task, {}).get("effective"),
            "items": _items(out.get("items", {}).get(t.task, {}), t.metric),
        }
    return result


def _items(logged: dict[str, dict], metric: str) -> dict[str, float] | None:
    """{doc id: the metric's value}; None unless every item has a number for it (a corpus
    metric such as BLEU is only defined over all items)."""
    if not logged or any(metric not in v for v in logged.values()):
        return None
    return {doc: v[metric] for doc, v in logged.items()}


@contextlib.contextmanager
def _bars_on_the_terminal(label: str):
    """lm-eval's own request bars (log-likelihoods, generations: most of a task's minutes) on
    the terminal as the pipeline's, named for the model; its other lines stay in the log. The
    bars are made through each module's `tqdm` name, which is all that is swapped."""
    import lm_eval.api.model as api_model
    import lm_eval.models.huggingface as hf_model

    def ours(made):
        def bar(*args, desc=None, **kwargs):
            if not (desc or "").startswith("Running"):  # tokenizing: a second, in the log
                return made(*args, desc=desc, **kwargs)
            kwargs.pop("file", None)
            return progress.bar(*args, desc=f"lm-eval, {label} model: {desc}", **kwargs)

        return bar

    kept = {module: module.tqdm for module in (api_model, hf_model)}
    for module, made in kept.items():
        module.tqdm = ours(made)
    try:
        yield
    finally:
        for module, made in kept.items():
            module.tqdm = made


def _in_process(spec: dict, label: str, log: Path, model_dir: Path, loaded) -> dict:
    """lm-eval here, on `loaded` or the model loaded as the drift loads it, its messages in the
    eval's log (their tail shown when it fails; -v: on the terminal), its bars on the terminal."""
    from pipeline.eval.backends import hf
    from pipeline.eval.task_scripts import run_lm_eval

    try:
        # cwd: local tasks name their data files relative to evals/tasks/
        with quiet.to_log(log), quiet.library_output(log), contextlib.chdir(TASKS_DIR), \
                _bars_on_the_terminal(label):  # fmt: skip
            run_lm_eval.check_tasks(spec)  # before a model loads: a typo costs nothing
            model = loaded if loaded is not None else hf.load(model_dir)
            out = run_lm_eval.evaluate({**spec, "model_args": {**spec["model_args"],
                                                               "pretrained": model}})  # fmt: skip
            return {**out, "dtype": hf.describe(model)["dtype"]}
    except run_lm_eval.UnknownTasks as unknown:  # as the script says it (_failure)
        raise _failure(2, f"error: lm-eval task not found: {unknown}", label) from None
    except Exception as e:
        tail = procs.tail(log, 40).strip()
        cause = f"{type(e).__name__}: {e}"
        raise _failure(None, f"{tail}\n{cause}" if tail else cause, label) from e


def _subprocess(spec: dict, label: str) -> dict:
    from pipeline.engines import eval_backend

    python = str(eval_backend.SERVE_PYTHON)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "spec.json").write_text(json.dumps(spec))
        env = serving_env.offline_env() if spec["model"] == BACKEND else None
        log = Path(tmp, "lm_eval.log")
        # cwd: local tasks name their data files relative to evals/tasks/
        code = procs.run(
            [python, str(SCRIPT), f"{tmp}/spec.json", f"{tmp}/out.json"], log, env, TASKS_DIR
        )
        out_path = Path(tmp, "out.json")
        if not out_path.is_file():  # vLLM may exit non-zero after success: trust the file
            raise _failure(code, procs.tail(log, 40), label)
        return json.loads(out_path.read_text())


def _engine_args(model_dir: Path, kv_cache_dtype: str) -> dict:
    from pipeline.engines import eval_backend

    return eval_backend.lm_eval_model_args(model_dir, kv_cache_dtype, MAX_MODEL_LEN, LM_EVAL_BATCH)


def _failure(code: int | None, log_tail: str, label: str) -> Exception:
    """code: the subprocess's exit status; None for lm-eval run in this process."""
    lines = log_tail.splitlines()
    errors = [line for line in lines if "Error" in line or "error:" in line]
    last = errors[-1].strip() if errors else (lines[-1] if lines else "no output")
    if "task not found" in last:
        return UserError(f"{last.removeprefix('error: ')} (local tasks live in {TASKS_DIR})")
    tail = "\n".join(lines[-15:])
    status = f" (exit {code})" if code is not None else ""
    return RuntimeError(f"lm-eval failed on the {label} model{status}:\n{tail}")


def compare(
    tasks: list[TaskSpec], original: dict, quantized: dict, floor: dict | None = None
) -> list[dict]:
    """Per task: both scores, recovery = quantized / original, the recovery gate's threshold,
    and where both runs logged their items: the paired comparison, and the floor's (the
    original against itself at FLOOR_BATCH)."""
    rows = []
    for t in tasks:
        o, q = original["tasks"][t.task], quantized["tasks"][t.task]
        f = floor["tasks"][t.task] if floor else {}
        recovery = q["value"] / o["value"] if o["value"] else None
        rows.append(
            {
                "task": t.task,
                "metric": t.metric,
                "num_fewshot": t.num_fewshot,
                "samples": q["samples"],
                "original": o["value"],
                "original_stderr": o["stderr"],
                "quantized": q["value"],
                "quantized_stderr": q["stderr"],
                "recovery": recovery,
                "recovery_threshold": t.recovery_threshold,
                "original_dtype": original.get("dtype"),
                "quantized_dtype": quantized.get("dtype"),
                "paired": _paired(o.get("items"), q.get("items"), t.confidence),
                "floor": _paired(o.get("items"), f.get("items"), t.confidence),
            }
        )
    return rows


def _paired(a: dict | None, b: dict | None, confidence: float) -> dict | None:
    return paired_tasks.compare(a, b, confidence) if a and b else None
