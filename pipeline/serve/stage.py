"""Serve stage: what vLLM does with the artifact — weight memory, KV-cache capacity, latency and
throughput under load — next to the original model measured the same way.

    python -m pipeline serve --model tiny-llama --recipe fp8     # = make serve RECIPE=fp8

By default the original is served beside the artifact and the two are benchmarked alternately
(pipeline/engines/vllm/bench.py), so their ratios are paired; its measurement is also kept as a
reference per (model, serve settings, vLLM version, host) and placement (TP, PP, GPU share) in
runs/<model>/original/serve/<key>/<placement>/, which `--original cached` compares against
instead (no second server; the ratio then carries whatever changed on the host in between).
A cached run places both sides where a paired run on these GPUs would (an 8B on one H100: 0.45
of it each, as when they share it), so that it finds the paired run's reference and its artifact is
measured alike; a reference kept only under another placement (another share, TP or PP: another
KV cache and throughput) is refused in one line that says what to run, never replaced silently.
The settings as placed and each side's GPUs, TP and share come from the config alone
(pipeline/serve/plan.py: `planned`, what --dry-run shows too).

Results: runs/<model>/<recipe>/serve/<fingerprint>/results.json (pipeline/serve/results.py),
the benchmark JSONs and logs beside it (the paired original's under original/), and the
manifest's "serve" entry; each settings and host keep their own. A failed run leaves
<fingerprint>.incomplete/ (results.json "complete": false) and a "failed" manifest entry.
"""

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pipeline.artifact import AfterQuantize, Artifact
from pipeline.config.engine_name import PACKAGE
from pipeline.config.recipe import ServeSettings
from pipeline.core import devices, environment
from pipeline.core.errors import ServerError, UserError
from pipeline.core.files import sha256_json, staging_dir, waiting_lock, write_json_atomic
from pipeline.core.rundir import StageEntry
from pipeline.engines import bench, server, serving_env
from pipeline.engines import placement as placing
from pipeline.models import kv_layout
from pipeline.planning import kv_cache
from pipeline.planning.geometry import Geometry
from pipeline.planning.gpus import this_node
from pipeline.planning.weights import artifact_bytes
from pipeline.serve import cost, slo
from pipeline.serve import plan as serve_plan
from pipeline.serve import results as serve_results
from pipeline.serve.compare import compare
from pipeline.serve.results import EngineFacts, Measurement, Predicted, ServeResults, Slo

# not inputs of the measurement: where and how long to wait for the server
NOT_INPUTS = {"startup_timeout_s"}
# where the original runs, as placed: its reference's folder within the key (placement_name)
PLACED = {"tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization"}


@dataclass
class ServeStage(AfterQuantize):
    quantize: Artifact
    settings: ServeSettings
    placement: (
        placing.Placement
    )  # each side's GPUs, TP and share (pipeline/engines/vllm/placement.py)
    port: int | None = None
    name: ClassVar[str] = "serve"
    folder: ClassVar[str] = "serve"
    starts_engine = True  # every serve starts its engines (unannotated: no dataclass field)

    @property
    def original_root(self) -> Path:
        return self.rundir.original / self.folder

    @classmethod
    def prepare(
        cls, q: Artifact, overrides: dict | None = None, port: int | None = None
    ) -> "ServeStage":
        serving_env.require("serve")
        settings, placement = serve_plan.planned(q, overrides)
        serve_plan.refuse_unservable(q, settings)
        if port is not None and server.port_in_use(port):
            raise UserError(
                f"port {port} on {server.HOST} is already in use; pick another (--port)"
            )
        return cls(quantize=q, settings=settings, placement=placement, port=port)

    def original_settings(self) -> ServeSettings:
        return serve_plan.original_settings(self.settings, self.placement)

    def original_key(self) -> str:
        """The original's references for this model, settings and host: one folder, with one
        folder inside per placement (reference_folder)."""
        # how many repeats, and whether paired, do not change what the reference is
        left_out = NOT_INPUTS | PLACED | {"original", "repeats"}
        settings = self.original_settings().model_dump(exclude=left_out)
        return sha256_json([self.quantize.model_identity, settings, _host_inputs()])[:16]

    def reference_folder(self) -> Path:
        """Where the original's reference under this placement is kept."""
        placed = placement_name(self.original_settings(), self.placement.side("original"))
        return self.original_root / self.original_key() / placed

    def cached_reference(self) -> Path | None:
        """The reference's results.json under this placement; None where there is none yet.
        UserError where the original was kept under another placement only: its KV cache and
        throughput are another share's, no baseline for this one."""
        folder = self.reference_folder()
        if (folder / "results.json").is_file():
            return folder / "results.json"
        kept = [
            p
            for p in sorted(folder.parent.glob("*/results.json"))
            if not p.parent.name.startswith(".") and not p.parent.name.endswith(".incomplete")
        ]
        if not kept:
            return None
        found = Measurement.model_validate_json(kept[0].read_text())
        raise UserError(
            f"--original cached: the original's reference for these settings was measured "
            f"{_where(found.placement, kept[0].parent.name)} ({kept[0].parent}), and a paired "
            f"serve on these GPUs places it {self._where_now()}: another share, TP or PP holds "
            "another KV cache and throughput. Run the same command with --original paired once "
            "(its original becomes the reference at this placement)"
        )

    def _where_now(self) -> str:
        placed = self.placement.side("original")
        return _where(_record(placed), placement_name(self.original_settings(), placed))

    def original_side(self, out: Path, port: int | None = None) -> bench.Side:
        name = f"{self.quantize.ref.name}-original"
        placed = self.placement.side("original")
        model = self.quantize.model_path
        if model is None:  # set when the quantize stage's inputs were read (load_inputs)
            raise RuntimeError(f"{name}: the original's files were not materialized")
        return bench.Side("original", model, name, self.original_settings(), out,
                    port, gpus=placed.gpus, placement=_record(placed))  # fmt: skip

    def original(self) -> tuple[Measurement, bool]:
        """The original's reference measurement under this placement: (results, cached).
        Where none was kept anywhere yet, it is measured alone first (said on the terminal)."""
        folder = self.reference_folder()
        with waiting_lock(folder.parent / f".{folder.name}.lock"):
            if done := self.cached_reference():
                return Measurement.model_validate_json(done.read_text()), True
            print(
                f"  no reference of the original yet: serving it alone first, "
                f"{self._where_now()}, as a paired serve places it (kept for later runs)",
                flush=True,
            )
            with keep_incomplete(folder) as tmp:
                results = bench.measure([self.original_side(tmp, self.port)])["original"]
            return Measurement.model_validate(results), False

    def keep_reference(self, measured: Path) -> None:
        """A paired run's original becomes the reference where there is none yet."""
        folder = self.reference_folder()
        with waiting_lock(folder.parent / f".{folder.name}.lock"):
            if not (folder / "results.json").is_file():
                with staging_dir(folder) as tmp:
                    shutil.copytree(measured, tmp, dirs_exist_ok=True)

    def inputs(self) -> dict:
        return {
            "quantize_fingerprint": self.quantize.entry().fingerprint,
            "settings": self.settings.model_dump(exclude=NOT_INPUTS),
            "host": _host_inputs(),
            "placement": self.placement.mode,  # one after the other measures something else
            "results_schema": serve_results.SCHEMA_VERSION,
        }

    def before_work(self) -> None:
        if self.settings.original == "cached":  # another placement's only: refused up front
            self.cached_reference()

    def outputs(self, folder: str) -> dict[str, str]:
        return {"results": f"{folder}/results.json"}

    def staging(self, final: Path):
        return keep_incomplete(final)

    def work(self, out: Path) -> dict:
        started = time.monotonic()
        q = self.quantize
        name = f"{q.ref.name}-{q.recipe.name}"
        placed = self.placement.side("quantized")
        mine_side = bench.Side("quantized", q.artifact, name, self.settings, out, self.port,
                         q.recipe.engine_args(), placed.gpus, _record(placed))  # fmt: skip
        with_original = self.settings.original == "paired"
        is_paired = with_original and self.placement.paired
        if with_original:
            sides = [self.original_side(out / "original"), mine_side]
            if is_paired:
                measured = bench.measure(sides, start_in_turn=self.placement.start_in_turn)
            else:
                print(f"  serving one after the other: {self.placement.reason}", flush=True)
                measured = {**bench.measure(sides[:1]), **bench.measure(sides[1:])}
            base, base_cached = Measurement.model_validate(measured["original"]), False
            self.keep_reference(out / "original")
        else:
            base, base_cached = self.original()
            measured = bench.measure([mine_side])
        mine = Measurement.model_validate(measured["quantized"])
        predicted = self._predicted(base, mine)
        slo_found = self._slo(base, mine, predicted)
        hw, price, hw_name = cost.hardware()  # after the servers stopped: the host measures idle
        results = ServeResults(
            model=q.ref.name,
            recipe=q.recipe.name,
            settings=self.settings,
            quantized=mine,
            original=base,
            original_cached=base_cached,
            placement=self.placement.record(),
            comparison=compare(base, mine, is_paired),
            slo=slo_found,
            predicted={side: p for side, (p, _) in predicted.items()},
            cost=cost.cost(base, mine, slo_found, is_paired, price, hw_name),
            bound=cost.against_bound(q.geometry, q.recipe, base, mine, self.settings, hw),
            complete=True,
        )
        write_json_atomic(out / "results.json", results.model_dump(mode="json"))
        cost.record_overheads(results, time.monotonic() - started, base_cached)
        top = max(results.comparison.levels, key=lambda lv: lv.concurrency, default=None)
        return {
            "original_cached": base_cached,
            "checkpoint_ratio": results.comparison.memory.checkpoint_bytes.ratio,
            "kv_cache_tokens_ratio": results.comparison.memory.kv_cache_tokens.ratio,
            "output_tok_s_ratio_top": top.output_tok_s.ratio if top else None,
        }

    def _slo(self, base: Measurement, mine: Measurement, predicted: dict) -> Slo:
        s = self.settings
        return Slo(
            ttft_ms=s.slo_ttft_ms,
            tpot_ms=s.slo_tpot_ms,
            attainment=s.slo_attainment,
            original=slo.side(base.levels, s, predicted["original"][1]),
            quantized=slo.side(mine.levels, s, predicted["quantized"][1]),
        )

    def _predicted(self, base: Measurement, mine: Measurement) -> dict[str, tuple]:
        """The capacity planner's figures from the config alone, beside what was measured:
        {side: (Predicted, memory-bound concurrency for the benchmark's requests)}."""

        g = self.quantize.geometry
        sides = (
            ("original", base, g.original_bytes, "auto"),
            (
                "quantized",
                mine,
                artifact_bytes(self.quantize.recipe, g),
                self.settings.kv_cache_dtype,
            ),
        )
        # vLLM's default max_num_batched_tokens for `vllm serve` (what a sliding window adds)
        node = this_node([gpu.line() for gpu in devices.seen()])
        on_cpu = serving_env.capabilities()["device"] == "cpu"
        scheduled = kv_cache.CPU_SCHEDULED_TOKENS if on_cpu or not node else node.scheduled_tokens
        out = {}
        for side, measured, weights, kv in sides:
            engine = measured.engine
            pool = kv_pool_bytes(engine, g, kv, *_parallel(self.placement, side))
            block = engine.block_size
            tokens = requests = None
            if pool and block:
                tokens = kv_cache.kv_tokens(pool, g, kv, measured.max_model_len, block, scheduled)
                per_request = self.settings.input_len + self.settings.output_len
                requests = kv_cache.max_requests(pool, g, kv, per_request, block, scheduled)
            predicted = Predicted(
                weights_bytes=weights,
                weights_measured=measured.checkpoint_bytes,
                kv_cache_tokens=tokens,
                kv_cache_tokens_measured=measured.engine.kv_cache_size_tokens,
            )
            out[side] = (predicted, requests)
        return out

    def load_results(self, entry: StageEntry) -> ServeResults:
        return serve_results.load(self.rundir.path / entry.outputs["results"])


def kv_pool_bytes(
    engine: EngineFacts, g: Geometry, kv_dtype: str, tp: int = 1, pp: int = 1
) -> int | None:
    """The engine's KV pool in the planner's bytes (every layer and KV head, as on one GPU: what
    kv_cache.kv_tokens and max_requests take), or None where vLLM did not say."""

    if engine.kv_cache_memory_bytes:  # the CPU's pool (VLLM_CPU_KVCACHE_SPACE), as before
        return engine.kv_cache_memory_bytes
    blocks, block = engine.num_gpu_blocks, engine.block_size
    per_token = kv_cache.bytes_per_token(g, kv_dtype)
    groups = g.kv_groups
    if blocks and block and len(groups) == 1 and groups[0].modelled:
        # One KV-cache group: a vLLM block spans every layer, so the pool is its blocks in the
        # planner's bytes, and kv_tokens / max_requests count exactly the blocks vLLM admits
        # requests by, on any TP and PP (the log's "Available KV cache memory" is one rank's
        # bytes, rounded to 0.01 GiB, and a little more than the whole blocks it holds).
        return blocks * block * per_token
    if engine.available_kv_gib and pp == 1:
        # A hybrid: a block spans one group's layers only, so the blocks do not give the bytes;
        # one rank's available memory does, scaled from its KV heads to all (approximate). With
        # PP a rank holds one stage's layers: left unsaid.
        per_rank = kv_layout.token_bytes(groups, kv_cache.element_bytes(kv_dtype), tp)
        if per_rank:
            return int(engine.available_kv_gib * kv_cache.GIB * per_token / per_rank)
    return None


def _parallel(placement: placing.Placement, key: str) -> tuple[int, int]:
    """The side's TP and PP (1, 1 where the placement does not name it)."""
    placed = next((s for s in placement.sides if s.key == key), None)
    return (placed.tensor_parallel_size, placed.pipeline_parallel_size) if placed else (1, 1)


def _host_inputs() -> dict:
    host = environment.host()
    return {
        PACKAGE: serving_env.version(),
        "cpu": host["cpu"],
        "cpu_count": host["cpu_count"],
        "gpus": host["gpus"],
    }


def _record(placed: placing.SidePlace) -> dict | None:
    return placed.record() if placed.gpus else None


def placement_name(settings: ServeSettings, placed: placing.SidePlace) -> str:
    """A reference's folder within its key: the original's TP, PP and GPU share as placed
    ("tp1-gpu0.45", "tp2-pp2-gpu0.9", "tp1-cpu": on a CPU the share means nothing)."""
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    name = f"tp{tp}" + (f"-pp{pp}" if pp > 1 else "")
    return name + (f"-gpu{settings.gpu_memory_utilization:g}" if placed.gpus else "-cpu")


def _where(placed, name: str) -> str:
    """A side's placement in words, from its record (a dict or results' SidePlacement; None
    on a CPU: then its folder's name, placement_name, says the TP)."""
    if placed is None:
        return f"in RAM ({name})"
    p = placed if isinstance(placed, dict) else placed.model_dump()
    gpus = p["gpus"]
    return (
        f"on GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))} at TP "
        f"{p['tensor_parallel_size']} with {p['gpu_memory_utilization']:g} of each"
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
