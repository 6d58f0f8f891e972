"""Serve stage: what vLLM does with the artifact — weight memory, KV-cache capacity, latency and
throughput under load — next to the original model measured the same way.

    python -m pipeline serve --model tiny-llama --recipe fp8     # = make serve RECIPE=fp8

The original's measurement is cached per (model, serve settings, vLLM version, host) in
runs/<model>/original/serve/<key>/. Results: runs/<model>/<recipe>/serve/results.json (the
artifact's measurement and the comparison), the benchmark JSONs and logs beside it, and the
manifest's "serve" entry. A failed run leaves serve.incomplete/ (results.json "complete": false)
and a "failed" manifest entry; nothing is marked done.
"""

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from pipeline import environment, serve_compare, vllm_server
from pipeline.backends import vllm
from pipeline.errors import UserError
from pipeline.fsutil import sha256_json, staging_dir, waiting_lock, write_json_atomic
from pipeline.recipe import ServeSettings
from pipeline.runner import run_in_rundir
from pipeline.serve_measure import measure
from pipeline.stages import quantize

STAGE = "serve"
FOLDER = "serve"
# not inputs of the measurement: where and how long to wait for the server
NOT_INPUTS = {"startup_timeout_s"}


@dataclass
class ServeJob:
    quantize: quantize.Job
    settings: ServeSettings
    port: int | None = None

    @property
    def folder(self) -> Path:
        return self.quantize.rundir.path / FOLDER

    @property
    def original_root(self) -> Path:
        return self.quantize.rundir.path.parent / "original" / FOLDER


def prepare(qjob: quantize.Job, overrides: dict | None = None, port: int | None = None):
    if not vllm.available():
        raise UserError(f"serve needs the serving env ({vllm.SERVE_PYTHON}): make setup")
    base = qjob.recipe.spec.serve.model_dump()
    try:
        settings = ServeSettings.model_validate({**base, **(overrides or {})})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UserError(f"serve settings: {where}: {first['msg']}") from None
    vllm.require_scheme(qjob.recipe.scheme(), "serve")
    vllm.require_kv_cache(
        settings.kv_cache_dtype, "serve", "; --kv-cache-dtype auto measures the weights alone"
    )
    if port is not None and vllm_server.port_in_use(port):
        raise UserError(
            f"port {port} on {vllm_server.HOST} is already in use; pick another (--port)"
        )
    return ServeJob(quantize=qjob, settings=settings, port=port)


def _settings_inputs(s: ServeSettings) -> dict:
    return s.model_dump(exclude=NOT_INPUTS)


def _host_inputs() -> dict:
    host = environment.host()
    return {
        "vllm": vllm.version(),
        "cpu": host["cpu"],
        "cpu_count": host["cpu_count"],
        "gpus": host["gpus"],
    }


def original_settings(job: ServeJob) -> ServeSettings:
    """The original as it is served without the pipeline: its own 16-bit KV cache (an FP8 KV
    cache is part of what a recipe buys, so it is compared against the original's)."""
    return job.settings.model_copy(update={"kv_cache_dtype": "auto"})


def original_key(job: ServeJob) -> str:
    q = job.quantize
    settings = _settings_inputs(original_settings(job))
    return sha256_json([q.model_identity, settings, _host_inputs()])[:16]


def original(job: ServeJob) -> tuple[dict, bool]:
    """The original model's measurement: (results, cached)."""
    folder = job.original_root / original_key(job)
    with waiting_lock(job.original_root / f".{folder.name}.lock"):
        done = folder / "results.json"
        if done.is_file():
            return json.loads(done.read_text()), True
        name = f"{job.quantize.ref.name}-original"
        with _staging(folder) as tmp:
            results = measure(job.quantize.model_path, name, original_settings(job), tmp, job.port)
        return results, False


def run(job: ServeJob, force: bool = False) -> tuple[dict, bool]:
    qentry = job.quantize.rundir.stage(quantize.STAGE)
    inputs = {
        "quantize_fingerprint": qentry["fingerprint"],
        "settings": _settings_inputs(job.settings),
        "host": _host_inputs(),
    }
    outputs = {"results": f"{FOLDER}/results.json"}
    return run_in_rundir(job.quantize, STAGE, inputs, outputs, lambda: _serve(job), force)


def _serve(job: ServeJob) -> dict:
    base, base_cached = original(job)
    q = job.quantize
    name = f"{q.ref.name}-{q.recipe.name}"
    with _staging(job.folder) as tmp:
        mine = measure(q.rundir.path / quantize.ARTIFACT, name, job.settings, tmp, job.port)
        results = {
            "model": q.ref.name,
            "recipe": q.recipe.name,
            "settings": job.settings.model_dump(),
            "quantized": mine,
            "original": base,
            "original_cached": base_cached,
            "comparison": serve_compare.compare(base, mine),
            "predicted": _predicted(job, base, mine),
            "complete": True,
        }
        write_json_atomic(tmp / "results.json", results)
    return {"comparison": results["comparison"], "original_cached": base_cached}


def _predicted(job: ServeJob, base: dict, mine: dict) -> dict:
    """The capacity planner's figures from the config alone, beside what was measured."""
    from pipeline import architecture, planner
    from pipeline.quantize_plan import artifact_bytes

    config = job.quantize.config
    out = {}
    for side, measured, weights, kv in (
        ("original", base, architecture.total_params(config) * 2, "auto"),
        (
            "quantized",
            mine,
            artifact_bytes(job.quantize.recipe, config),
            job.settings.kv_cache_dtype,
        ),
    ):
        pool = measured["engine"].get("kv_cache_memory_bytes")
        out[side] = {
            "weights_bytes": weights,
            "weights_measured": measured["checkpoint_bytes"],
            "kv_cache_tokens": planner.kv_tokens(pool, config, kv) if pool else None,
            "kv_cache_tokens_measured": measured["engine"].get("kv_cache_size_tokens"),
        }
    return out


@contextlib.contextmanager
def _staging(final: Path) -> Iterator[Path]:
    """staging_dir, except that a failed attempt's files move to <final>.incomplete (replacing
    older ones) for inspection, instead of being deleted."""
    incomplete = final.parent / (final.name + ".incomplete")
    keep: list[Path] = []
    try:
        with staging_dir(final) as tmp:
            keep.append(tmp)
            try:
                yield tmp
            except BaseException:
                shutil.rmtree(incomplete, ignore_errors=True)
                os.replace(tmp, incomplete)
                tmp.mkdir()  # staging_dir removes it on the way out
                raise
    finally:
        if final.exists() and incomplete.exists():
            shutil.rmtree(incomplete, ignore_errors=True)


def load_results(job: ServeJob) -> dict:
    return json.loads((job.folder / "results.json").read_text())
