"""One model under vLLM: start the server, read what the engine says, smoke-test it through the
OpenAI client, run `vllm bench serve` at each concurrency, stop the server.

Everything lands in one folder as it happens (server.log, bench-c<N>.json/.log, results.json
with "complete": false until the end), so a failure leaves a readable partial record.
"""

import json
import time
from pathlib import Path

from pipeline.config.recipe import ServeSettings
from pipeline.core import procs, progress
from pipeline.core.errors import ServerError
from pipeline.core.files import write_json_atomic
from pipeline.core.paths import VLLM_SCRIPTS
from pipeline.quantize import artifact
from pipeline.serve import engine_facts
from pipeline.serve.server import Server, first_error
from pipeline.serving_env import SERVE_PYTHON

MAX_MODEL_LEN = 4096  # default context when the recipe sets none: KV pools stay modest on CPU
PERCENTILES = ("median", "p99")


def max_model_len(model_dir: Path, s: ServeSettings) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    native = int(config.get("max_position_embeddings", MAX_MODEL_LEN))
    return s.max_model_len or min(native, MAX_MODEL_LEN)


def measure(model_dir: Path, name: str, s: ServeSettings, out: Path, port: int | None) -> dict:
    results: dict = {"model_dir": str(model_dir), "served_name": name, "complete": False}
    context = max_model_len(model_dir, s)
    results["max_model_len"] = context
    results["checkpoint_bytes"] = sum(info.nbytes for info in artifact.tensors(model_dir).values())
    log = out / "server.log"
    print(f"  starting vLLM server for {name} (log: {log})", flush=True)
    started = time.monotonic()
    with Server(model_dir, name, s, log, context, port) as server:
        engine = engine_facts.from_log(log.read_text(errors="replace"))
        engine.update(engine_facts.from_metrics(server.metrics()))
        engine["ready_seconds"] = round(time.monotonic() - started, 2)
        results["engine"] = engine
        write_json_atomic(out / "results.json", results)
        results["smoke"] = smoke(server, out)
        results["levels"] = []
        bar = progress.bar(s.concurrency, desc=f"vllm bench serve {name}", unit="level")
        for c in bar:
            results["levels"].append(bench(server, model_dir, s, c, out))
            write_json_atomic(out / "results.json", results)
    results["complete"] = True
    write_json_atomic(out / "results.json", results)
    return results


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
    empty = [kind for kind, r in result.items() if not r["text"].strip()]
    if empty:
        raise ServerError(f"OpenAI client smoke check: empty {', '.join(empty)} response")
    return result


def bench(server: Server, model_dir: Path, s: ServeSettings, concurrency: int, out: Path) -> dict:
    prompts = max(s.num_prompts, 2 * concurrency)
    name = f"bench-c{concurrency}"
    cmd = [
        str(SERVE_PYTHON),
        str(VLLM_SCRIPTS / "bench_serve.py"),
        "--base-url", server.url,
        "--model", server.name,
        "--tokenizer", str(model_dir),
        "--dataset-name", "random",
        "--random-input-len", str(s.input_len),
        "--random-output-len", str(s.output_len),
        "--ignore-eos",  # every request generates output_len tokens: comparable runs
        "--num-prompts", str(prompts),
        "--max-concurrency", str(concurrency),
        "--temperature", "0",
        "--seed", str(s.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--save-result",
        "--result-dir", str(out),
        "--result-filename", f"{name}.json",
    ]  # fmt: skip
    before = server.metrics()
    kv_peak = 0.0
    with procs.group(cmd, out / f"{name}.log") as proc:
        while proc.poll() is None:
            _check_alive(server, concurrency)
            usage = engine_facts.metric(server.metrics(), "vllm:kv_cache_usage_perc")
            kv_peak = max(kv_peak, usage or 0.0)
            time.sleep(0.5)
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
    preempt = [engine_facts.metric(m, "vllm:num_preemptions_total") for m in (before, after)]
    return {
        "concurrency": concurrency,
        "num_prompts": prompts,
        "completed": data["completed"],
        "failed": data.get("failed", 0),
        "duration_s": data["duration"],
        "output_tok_s": data["output_throughput"],
        "total_tok_s": data["total_token_throughput"],
        "requests_s": data["request_throughput"],
        **{
            f"{metric}_{p}_ms": data[f"{p}_{metric}_ms"]
            for metric in ("ttft", "itl", "tpot", "e2el")
            for p in PERCENTILES
        },
        "kv_cache_usage_peak_pct": round(100 * kv_peak, 2),
        "preemptions": (preempt[1] - preempt[0]) if None not in preempt else None,
    }


def _check_alive(server: Server, concurrency: int) -> None:
    if not server.alive():
        raise ServerError(
            f"vLLM server died mid-benchmark (concurrency {concurrency}); last lines of "
            f"{server.log_path}:\n{server.log_tail()}"
        )
