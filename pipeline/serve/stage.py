"""Serve stage: what vLLM does with the artifact — weight memory, KV-cache capacity, latency and
throughput under load — next to the original model measured the same way.

    python -m pipeline serve --model tiny-llama --recipe fp8     # = make serve RECIPE=fp8

The original's measurement is cached per (model, serve settings, vLLM version, host) in
runs/<model>/original/serve/<key>/. Results: runs/<model>/<recipe>/serve/<fingerprint>/
results.json (pipeline/serve/results.py), the benchmark JSONs and logs beside it, and the
manifest's "serve" entry; each settings and host keep their own. A failed run leaves
<fingerprint>.incomplete/ (results.json "complete": false) and a "failed" manifest entry.
"""

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline import serving_env
from pipeline.config.recipe import ServeSettings
from pipeline.config.strict import validated
from pipeline.core import environment
from pipeline.core.errors import ServerError, UserError
from pipeline.core.files import sha256_json, staging_dir, waiting_lock, write_json_atomic
from pipeline.core.rundir import StageEntry
from pipeline.core.stage import AfterQuantize
from pipeline.quantize.stage import QuantizeStage
from pipeline.serve import results as serve_results
from pipeline.serve import server
from pipeline.serve.compare import compare
from pipeline.serve.measure import measure
from pipeline.serve.results import Measurement, Predicted, ServeResults

# not inputs of the measurement: where and how long to wait for the server
NOT_INPUTS = {"startup_timeout_s"}


@dataclass
class ServeStage(AfterQuantize):
    quantize: QuantizeStage
    settings: ServeSettings
    port: int | None = None
    name: str = "serve"
    folder: str = "serve"

    @property
    def original_root(self) -> Path:
        return self.rundir.path.parent / "original" / self.folder

    @classmethod
    def prepare(
        cls, q: QuantizeStage, overrides: dict | None = None, port: int | None = None
    ) -> "ServeStage":
        serving_env.require("serve")
        base = q.recipe.spec.serve.model_dump()
        settings = validated(ServeSettings, {**base, **(overrides or {})}, "serve settings")
        check_fit(settings, q.config)
        serving_env.require_scheme(q.recipe.scheme(), "serve")
        serving_env.require_moe(q.recipe.scheme(), q.config, "serve")
        serving_env.require_kv_cache(
            settings.kv_cache_dtype, "serve", "; --kv-cache-dtype auto measures the weights alone"
        )
        if port is not None and server.port_in_use(port):
            raise UserError(
                f"port {port} on {server.HOST} is already in use; pick another (--port)"
            )
        return cls(quantize=q, settings=settings, port=port)

    def original_settings(self) -> ServeSettings:
        """The original as it is served without the pipeline: its own 16-bit KV cache (an FP8
        KV cache is part of what a recipe buys, so it is compared against the original's)."""
        return self.settings.model_copy(update={"kv_cache_dtype": "auto"})

    def original_key(self) -> str:
        settings = self.original_settings().model_dump(exclude=NOT_INPUTS)
        return sha256_json([self.quantize.model_identity, settings, _host_inputs()])[:16]

    def original(self) -> tuple[Measurement, bool]:
        """The original model's measurement: (results, cached)."""
        folder = self.original_root / self.original_key()
        with waiting_lock(self.original_root / f".{folder.name}.lock"):
            done = folder / "results.json"
            if done.is_file():
                return Measurement.model_validate_json(done.read_text()), True
            name = f"{self.quantize.ref.name}-original"
            with keep_incomplete(folder) as tmp:
                model = self.quantize.model_path
                results = measure(model, name, self.original_settings(), tmp, self.port)
            return Measurement.model_validate(results), False

    def inputs(self) -> dict:
        return {
            "quantize_fingerprint": self.quantize.entry().fingerprint,
            "settings": self.settings.model_dump(exclude=NOT_INPUTS),
            "host": _host_inputs(),
        }

    def before_work(self) -> None:
        pass

    def outputs(self, folder: str) -> dict[str, str]:
        return {"results": f"{folder}/results.json"}

    def staging(self, final: Path):
        return keep_incomplete(final)

    def work(self, out: Path) -> dict:
        base, base_cached = self.original()
        q = self.quantize
        name = f"{q.ref.name}-{q.recipe.name}"
        mine = Measurement.model_validate(measure(q.artifact, name, self.settings, out, self.port))
        results = ServeResults(
            model=q.ref.name,
            recipe=q.recipe.name,
            settings=self.settings,
            quantized=mine,
            original=base,
            original_cached=base_cached,
            comparison=compare(base, mine),
            predicted=self._predicted(base, mine),
            complete=True,
        )
        write_json_atomic(out / "results.json", results.model_dump(mode="json"))
        top = max(results.comparison.levels, key=lambda lv: lv.concurrency, default=None)
        return {
            "original_cached": base_cached,
            "checkpoint_ratio": results.comparison.memory.checkpoint_bytes.ratio,
            "kv_cache_tokens_ratio": results.comparison.memory.kv_cache_tokens.ratio,
            "output_tok_s_ratio_top": top.output_tok_s.ratio if top else None,
        }

    def _predicted(self, base: Measurement, mine: Measurement) -> dict[str, Predicted]:
        """The capacity planner's figures from the config alone, beside what was measured."""
        from pipeline import capacity
        from pipeline.models import architecture
        from pipeline.quantize.plan import artifact_bytes

        config = self.quantize.config
        sides = (
            ("original", base, architecture.total_params(config) * 2, "auto"),
            (
                "quantized",
                mine,
                artifact_bytes(self.quantize.recipe, config),
                self.settings.kv_cache_dtype,
            ),
        )
        # vLLM's default max_num_batched_tokens for `vllm serve` (what a sliding window adds);
        # on GPUs the H100-class default (serve settings do not name the GPU)
        on_cpu = serving_env.capabilities()["device"] == "cpu"
        scheduled = capacity.CPU_SCHEDULED_TOKENS if on_cpu else 8_192
        out = {}
        for side, measured, weights, kv in sides:
            engine = measured.engine
            pool, block = engine.kv_cache_memory_bytes, engine.block_size
            tokens = None
            if pool and block:
                tokens = capacity.kv_tokens(
                    pool, config, kv, measured.max_model_len, block, scheduled
                )
            out[side] = Predicted(
                weights_bytes=weights,
                weights_measured=measured.checkpoint_bytes,
                kv_cache_tokens=tokens,
                kv_cache_tokens_measured=measured.engine.kv_cache_size_tokens,
            )
        return out

    def load_results(self, entry: StageEntry) -> ServeResults:
        return serve_results.load(self.rundir.path / entry.outputs["results"])


def _host_inputs() -> dict:
    host = environment.host()
    return {
        "vllm": serving_env.version(),
        "cpu": host["cpu"],
        "cpu_count": host["cpu_count"],
        "gpus": host["gpus"],
    }


def check_fit(settings: ServeSettings, config: dict) -> None:
    """What vLLM would refuse at start-up, after minutes of quantizing: refused up front."""
    heads = config.get("num_attention_heads") or 1
    tp = settings.tensor_parallel_size
    if heads % tp:
        valid = [n for n in range(1, heads + 1) if heads % n == 0]
        raise UserError(
            f"tensor_parallel_size {tp} does not divide the model's {heads} attention heads "
            f"(valid: {', '.join(map(str, valid[:8]))})"
        )
    longest = config.get("max_position_embeddings")
    if settings.max_model_len and longest and settings.max_model_len > longest:
        raise UserError(
            f"max_model_len {settings.max_model_len:,} is longer than the model's "
            f"max_position_embeddings {longest:,}"
        )


@contextlib.contextmanager
def keep_incomplete(final: Path) -> Iterator[Path]:
    """staging_dir, except that a failed attempt's files move to <final>.incomplete (replacing
    older ones) for inspection, instead of being deleted."""
    incomplete = final.parent / (final.name + ".incomplete")
    try:
        with staging_dir(final) as tmp:
            try:
                yield tmp
            except ServerError as e:  # its message names the log where it is now
                _move_aside(tmp, incomplete)
                raise ServerError(str(e).replace(str(tmp), str(incomplete))) from None
            except BaseException:
                _move_aside(tmp, incomplete)
                raise
    finally:
        if final.exists() and incomplete.exists():
            shutil.rmtree(incomplete, ignore_errors=True)


def _move_aside(tmp: Path, incomplete: Path) -> None:
    shutil.rmtree(incomplete, ignore_errors=True)
    os.replace(tmp, incomplete)
    tmp.mkdir()  # staging_dir removes it on the way out
