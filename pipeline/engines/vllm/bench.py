"""Models under vLLM, measured side by side: start every server at once, read what each engine
says, smoke-test each through the OpenAI client, then run `vllm bench serve` against them
alternately — at each concurrency, repeat r benchmarks A then B when r is even and B then A when
it is odd — so that both see the same machine. On a shared host the load drifts over minutes; a
ratio of runs taken minutes apart measures that drift, a ratio of interleaved runs does not.

Everything lands in the side's folder as it happens (server.log, bench-c<N>-r<R>.json/.log,
results.json with "complete": false until the end), so a failure leaves a readable record.
"""

import contextlib
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.recipe import ServeSettings
from pipeline.core import procs, progress
from pipeline.core.devices import Gpu
from pipeline.core.errors import ServerError
from pipeline.core.files import write_json_atomic
from pipeline.engines.vllm import engine_facts
from pipeline.engines.vllm.bench_results import Metrics
from pipeline.engines.vllm.server import Server, first_error
from pipeline.engines.vllm.serving_env import SERVE_PYTHON, VLLM_SCRIPTS
from pipeline.planning import geometry
from pipeline.planning.geometry import Geometry
from pipeline.quantize import artifact

MAX_MODEL_LEN = 4096  # default context when the recipe sets none: KV pools stay modest on CPU
PERCENTILES = ("median", "p99")
COUNTS = ("completed", "failed")  # summed over repeats; every other metric is their median
FINISHED = "vllm:request_success_total"  # the engine's requests finished, whatever the reason


@dataclass
class Side:
    """One model to serve: where its files go and how it is started."""

    key: str  # "original" | "quantized"
    model_dir: Path
    name: str  # --served-model-name
    settings: ServeSettings
    out: Path
    port: int | None = None
    engine_args: list[str] = field(default_factory=list)  # online quantization's flag
    gpus: tuple[Gpu, ...] = ()  # where the placement put it (planning/placement.py)
    placement: dict | None = None  # its record for the results


def max_model_len(model_dir: Path, s: ServeSettings) -> int:
    return max_model_len_of(geometry.of(json.loads((model_dir / "config.json").read_text())), s)


def max_model_len_of(g: Geometry, s: ServeSettings) -> int:
    native = g.max_position or MAX_MODEL_LEN
    return s.max_model_len or min(native, MAX_MODEL_LEN)


def measure(sides: list[Side], start_in_turn: bool = False) -> dict[str, dict]:
    """Serve every side at once and benchmark them alternately: {side key: results}.
    start_in_turn: each server healthy before the next starts (engines sharing GPUs must not
    profile their memory at the same time)."""
    results: dict[str, dict] = {}
    servers: dict[str, Server] = {}
    for side in sides:
        side.out.mkdir(parents=True, exist_ok=True)
        context = max_model_len(side.model_dir, side.settings)
        results[side.key] = {
            "model_dir": str(side.model_dir),
            "served_name": side.name,
            "complete": False,
            "max_model_len": context,
            "checkpoint_bytes": artifact.tensor_bytes(side.model_dir),
            "gpus": len(side.gpus) or None,
            "placement": side.placement,
            "levels": [],
        }
        servers[side.key] = Server(
            side.model_dir,
            side.name,
            side.settings,
            side.out / "server.log",
            context,
            side.port,
            side.engine_args,
            side.gpus,
        )
    if not start_in_turn:  # started together, they read their checkpoints from one disk
        together = sum(results[side.key]["checkpoint_bytes"] for side in sides)
        for server in servers.values():
            server.reading(together)
    with contextlib.ExitStack() as stack:
        for side in sides:
            log = side.out / "server.log"
            print(f"  starting vLLM server for {side.name} (log: {log})", flush=True)
            stack.callback(servers[side.key].stop)
            servers[side.key].start()
            if start_in_turn:
                servers[side.key].wait_healthy()
        # started now, its import of vLLM overlaps the servers' start-up
        worker = stack.enter_context(BenchWorker(sides[-1].out / "bench-worker.log"))
        for side in sides:
            server = servers[side.key]
            server.wait_healthy()
            engine = engine_facts.from_log(server.log_path.read_text(errors="replace"))
            engine.update(engine_facts.from_metrics(server.metrics()))
            engine["ready_seconds"] = server.ready_seconds
            engine["memory_after_load_bytes"] = server.memory_bytes()
            results[side.key]["engine"] = engine
            _save(side, results)
        for side in sides:
            results[side.key]["smoke"] = smoke(servers[side.key], side.out)
        _bench_alternately(sides, servers, results, worker)
        for side in sides:
            results[side.key]["engine"]["memory_after_bench_bytes"] = servers[
                side.key
            ].memory_bytes()
    for side in sides:
        results[side.key]["complete"] = True
        _save(side, results)
    return results


def _bench_alternately(
    sides: list[Side], servers: dict[str, Server], results: dict, worker: "BenchWorker"
) -> None:
    s = sides[0].settings
    bar = progress.bar(
        total=len(s.concurrency) * s.repeats * len(sides), desc="vllm bench serve", unit="run"
    )
    sequence = 0
    with bar:
        for c in s.concurrency:
            runs: dict[str, list[dict]] = {side.key: [] for side in sides}
            for r in range(s.repeats):
                for side in sides if r % 2 == 0 else sides[::-1]:
                    now = f"{side.key} c={c} repeat {r + 1}/{s.repeats}"
                    bar.set_postfix_str(now)

                    def said(requests: str, now=now) -> None:  # a terminal's bar, not a log's
                        bar.set_postfix_str(f"{now}: {requests}", refresh=bar.fp.isatty())

                    run = bench(worker, servers[side.key], side, c, r, said)
                    runs[side.key].append({**run, "repeat": r, "sequence": sequence})
                    sequence += 1
                    bar.update()
            for side in sides:
                prompts = num_prompts(side.settings, c)
                level = {"concurrency": c, "num_prompts": prompts, **median(runs[side.key])}
                results[side.key]["levels"].append({**level, "runs": runs[side.key]})
                _save(side, results)


def median(runs: list[dict]) -> dict:
    """Counts summed, every other metric the median of the runs (None if any run lacks it)."""
    out = {}
    for name in Metrics.model_fields:
        values = [run.get(name) for run in runs]
        if name in COUNTS:
            out[name] = sum(v or 0 for v in values)
        elif values and None not in values:
            out[name] = statistics.median([v for v in values if v is not None])
        else:
            out[name] = None
    return out


def _save(side: Side, results: dict) -> None:
    write_json_atomic(side.out / "results.json", results[side.key])


def smoke(server: Server, out: Path) -> dict:
    """Greedy streaming chat + completion through the official OpenAI client."""
    log = out / "openai-smoke.log"
    cmd = [str(SERVE_PYTHON), str(VLLM_SCRIPTS / "openai_smoke.py"), server.url, server.name]
    code = procs.run(cmd, log)
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.startswith("{")]
    if code != 0 or not lines:
        first = first_error(server.log_path)  # the engine's root cause, if it crashed
        cause = f"; the server's first error: {first}" if first else ""
        raise ServerError(
            f"OpenAI client smoke check failed (exit {code}){cause}; server log "
            f"{server.log_path}:\n{procs.tail(log)}"
        )
    result = json.loads(lines[-1])
    empty = [kind for kind, r in result.items() if not r["tokens"]]
    if empty:
        kinds = " and ".join(empty)
        raise ServerError(f"OpenAI client smoke check: no tokens in the {kinds} response")
    return result


def num_prompts(s: ServeSettings, concurrency: int) -> int:
    return max(s.num_prompts, 2 * concurrency)


class BenchWorker:
    """One serving-env process that runs every `vllm bench serve` of a measurement in turn
    (pipeline/vllm_scripts/bench_worker.py): vLLM is imported once, not once per run."""

    def __init__(self, log: Path):
        self.log = log
        self.cmd = [str(SERVE_PYTHON), str(VLLM_SCRIPTS / "bench_worker.py")]

    def __enter__(self) -> "BenchWorker":
        self._group = procs.group(self.cmd, self.log, stdin=subprocess.PIPE)
        self.proc = self._group.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._group.__exit__(*exc)

    def submit(self, argv: list[str], log: Path) -> Path:
        """Starts a run; returns the file that holds its exit code once it is over."""
        done = log.with_name(log.name + ".exit")
        done.unlink(missing_ok=True)
        stdin = self.proc.stdin
        assert stdin is not None  # the worker is started with stdin=PIPE
        stdin.write((json.dumps({"argv": argv, "log": str(log)}) + "\n").encode())
        stdin.flush()
        return done

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise ServerError(
                f"vllm bench serve stopped (exit {self.proc.returncode}); last lines of "
                f"{self.log}:\n{procs.tail(self.log)}"
            )


def bench(
    worker: BenchWorker,
    server: Server,
    side: Side,
    concurrency: int,
    repeat: int,
    said: Callable[[str], None] | None = None,
) -> dict:
    """One `vllm bench serve` run; `said` hears its requests finished so far (the server's own
    counter), every few seconds: a run at concurrency 1 of a slow model lasts a minute."""
    s, out = side.settings, side.out
    prompts = num_prompts(s, concurrency)
    name = f"bench-c{concurrency}-r{repeat}"
    argv = [
        "--base-url", server.url,
        "--model", server.name,
        "--tokenizer", str(side.model_dir),
        "--dataset-name", "random",
        "--random-input-len", str(s.input_len),
        "--random-output-len", str(s.output_len),
        "--ignore-eos",  # every request generates output_len tokens: comparable runs
        "--num-prompts", str(prompts),
        "--max-concurrency", str(concurrency),
        "--temperature", "0",
        "--seed", str(s.seed),  # the same prompts in every repeat and for both models
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--goodput", f"ttft:{s.slo_ttft_ms:g}", f"tpot:{s.slo_tpot_ms:g}",
        "--save-result",
        "--result-dir", str(out),
        "--result-filename", f"{name}.json",
    ]  # fmt: skip
    before = server.metrics()
    finished_before = engine_facts.metric(before, FINISHED) or 0.0
    kv_peak, last_said = 0.0, time.monotonic()
    done = worker.submit(argv, out / f"{name}.log")
    while not done.is_file():
        _check_alive(server, concurrency)
        worker.check_alive()
        now = server.metrics()
        kv_peak = max(kv_peak, engine_facts.metric(now, "vllm:kv_cache_usage_perc") or 0.0)
        if said and time.monotonic() - last_said >= 3:
            finished = (engine_facts.metric(now, FINISHED) or 0.0) - finished_before
            said(f"{finished:.0f}/{prompts} requests")
            last_said = time.monotonic()
        time.sleep(0.5)
    done.unlink()
    _check_alive(server, concurrency)
    path = out / f"{name}.json"
    if not path.is_file():
        raise ServerError(
            f"vllm bench serve failed at concurrency {concurrency}:\n"
            + procs.tail(out / f"{name}.log")
        )
    data = json.loads(path.read_text())
    if data.get("failed"):
        raise ServerError(
            f"vllm bench serve: {data['failed']} of {prompts} requests failed at concurrency "
            f"{concurrency}; server log:\n{server.log_tail()}"
        )
    after = server.metrics()
    first, last = (engine_facts.metric(m, "vllm:num_preemptions_total") for m in (before, after))
    return {
        "completed": data["completed"],
        "failed": data.get("failed", 0),
        "duration_s": data["duration"],
        "output_tok_s": data["output_throughput"],
        "total_tok_s": data["total_token_throughput"],
        "requests_s": data["request_throughput"],
        "goodput_requests_s": data.get("request_goodput"),
        **{
            f"{metric}_{p}_ms": data[f"{p}_{metric}_ms"]
            for metric in ("ttft", "itl", "tpot", "e2el")
            for p in PERCENTILES
        },
        "kv_cache_usage_peak_pct": round(100 * kv_peak, 2),
        "preemptions": last - first if first is not None and last is not None else None,
    }


def _check_alive(server: Server, concurrency: int) -> None:
    if not server.alive():
        raise ServerError(
            f"vLLM server died mid-benchmark (concurrency {concurrency}); last lines of "
            f"{server.log_path}:\n{server.log_tail()}"
        )
