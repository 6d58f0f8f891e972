"""Where the cells run: one after another here (`local`), or as Ray tasks (`ray`) on the cluster
at RAY_ADDRESS (a local Ray when unset), each asking for as many GPUs as its tensor-parallel
size. Either way each result comes back to the caller, which writes it to the store."""

import os
from collections.abc import Callable, Iterable

from pipeline.core.errors import UserError
from pipeline.core.paths import REPO
from pipeline.core.progress import bar
from pipeline.nightly.cell import execute
from pipeline.nightly.matrix import Cell

Done = Callable[[dict], None]
NAMES = ("local", "ray")


def run(name: str, cells: list[Cell], log_dir: str, done: Done) -> None:
    """`name` is one of NAMES (the runner checks it before a run is recorded)."""
    (_ray if name == "ray" else _local)(cells, log_dir, done)


def _local(cells: Iterable[Cell], log_dir: str, done: Done) -> None:
    cells = list(cells)
    progress = bar(total=len(cells), desc="nightly cells", unit="cell")
    for cell in cells:
        progress.set_postfix_str(f"{cell.model} × {cell.name}", refresh=True)
        done(execute(cell, log_dir))
        progress.update()
    progress.close()


def _ray(cells: list[Cell], log_dir: str, done: Done) -> None:
    import ray

    address = os.environ.get("RAY_ADDRESS")
    if not address:
        os.environ.pop("RAY_ADDRESS", None)  # empty means unset for us; Ray might disagree
    env = {k: os.environ[k] for k in ("RUNS_DIR", "PIPELINE_CACHE", "HF_HOME") if k in os.environ}
    if address:  # a remote cluster gets this checkout (not its runs or envs) as working dir
        runtime = {"working_dir": str(REPO), "excludes": ["runs", ".venv*", ".cache", "reports"]}
        ray.init(address=address, runtime_env={**runtime, "env_vars": env}, log_to_driver=False)
    else:
        ray.init(
            num_cpus=max(1, os.cpu_count() or 1),
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=200 * 2**20,  # results are small dicts
            runtime_env={"env_vars": env},
        )
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        remote = ray.remote(execute)
        pending = {}
        for cell in cells:
            need = cell.tensor_parallel_size if gpus else 0  # a CPU-only cluster: CPU cells
            if need > gpus > 0:
                raise UserError(
                    f"cell {cell.model} × {cell.name} needs {need} GPUs; cluster has {gpus:g}"
                )
            ref = remote.options(num_gpus=need, num_cpus=1).remote(cell, log_dir)
            pending[ref] = cell
        progress = bar(total=len(pending), desc="nightly cells (ray)", unit="cell")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            cell = pending.pop(ready[0])
            try:
                done(ray.get(ready[0]))
            except ray.exceptions.RayError as e:  # the worker died: the cell failed, not the run
                done(_crashed(cell, e))
            progress.update()
        progress.close()
    finally:
        ray.shutdown()


def _crashed(cell: Cell, e: Exception) -> dict:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return {
        "model": cell.model,
        "cell": cell.name,
        "recipe": cell.recipe,
        "overrides_sha": cell.overrides_sha,
        "status": "failed",
        "error": f"ray: {first[:400]}",
        "stages": {},
        "metrics": [],
    }
