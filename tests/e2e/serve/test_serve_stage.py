"""Serve stage with real vLLM (CPU build) on tiny-llama: engine numbers, the paired benchmark, SLO
capacity, engine memory, smoke check, the original's cached reference, and process hygiene when
things go wrong."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.planning import geometry
from tests.conftest import REPO, cli
from tests.e2e.conftest import ONE_SIDE, SWEEP, needs_serving_env, results_path

pytestmark = pytest.mark.slow

VLLM_PROCESSES = r"vllm\.entrypoints|VLLM::|bench_worker\.py|openai_smoke\.py"


def vllm_processes() -> list[str]:
    """vLLM processes this test worker started, or a command it ran did, still running (another
    worker's servers are theirs: xdist's PYTEST_XDIST_WORKER, which every child inherits, tells)."""
    out = subprocess.run(["pgrep", "-fa", VLLM_PROCESSES], capture_output=True, text=True)
    # a <defunct> entry is already dead (a zombie waiting for init to reap it): not left running
    found = [x for x in out.stdout.splitlines() if "pgrep" not in x and "<defunct>" not in x]
    return [x for x in found if _worker_of(x.split()[0]) == os.environ.get("PYTEST_XDIST_WORKER")]


def _worker_of(pid: str) -> str | None:
    try:
        variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return "(gone)"  # ended meanwhile, or not ours to read: not left by this worker
    for variable in variables:
        if variable.startswith(b"PYTEST_XDIST_WORKER="):
            return variable.split(b"=", 1)[1].decode()
    return None


@pytest.mark.cpu_host  # the 1 GiB CPU KV pool
def test_engine_numbers_match_the_model_config(served_fp8, tiny_model):
    results, _ = served_fp8
    config = json.loads((tiny_model / "config.json").read_text())
    # K and V, per layer and KV head, head_dim values of 2 bytes (bf16 KV cache)
    kv_bytes_per_token = (
        config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2 * 2
    )
    for side in ("original", "quantized"):
        engine = results[side]["engine"]
        pool = engine["kv_cache_memory_bytes"]
        assert pool == 2**30  # cpu_kvcache_space_gib: 1
        assert engine["kv_cache_size_tokens"] == pool // kv_bytes_per_token == 524_288
        assert engine["kv_cache_tokens"] == engine["kv_cache_size_tokens"]  # log == /metrics
        context = results[side]["max_model_len"]
        assert engine["kv_cache_max_concurrency"] == pytest.approx(524_288 / context)
        assert engine["ready_seconds"] > 0 and engine["weights_load_seconds"] >= 0
    # the capacity planner, from the config alone, within 2% of what was built and allocated
    for side, p in results["predicted"].items():
        assert p["weights_bytes"] == pytest.approx(p["weights_measured"], rel=0.02), side
        assert p["kv_cache_tokens"] == pytest.approx(p["kv_cache_tokens_measured"], rel=0.02)
    memory = results["comparison"]["memory"]
    assert memory["kv_cache_tokens"]["ratio"] == 1.0  # same KV dtype: FP8 weights free no KV
    assert memory["checkpoint_bytes"]["ratio"] == pytest.approx(0.702, abs=0.005)


@pytest.mark.cpu_host  # the block shows a CPU host's serve
def test_the_docs_serve_block_is_what_serve_prints(served_fp8, session_runs):
    """jobs.md's excerpt of `make serve MODEL=tiny-llama RECIPE=fp8` (its levels here: SWEEP's)."""
    from pipeline.cli import doc_samples

    printed = served_fp8[1].stdout
    printed = printed[printed.index("serve tiny-llama") :]  # after the quantize's lines
    assert not (why := doc_samples.mismatch("serve --recipe fp8", printed, session_runs)), why


def test_benchmark_levels_are_complete_paired_and_interleaved(served_fp8):
    results, result = served_fp8
    # where the sides ran (planning/placement.py): up at once, so their runs pair
    assert results["placement"]["mode"] in ("cpu", "side-by-side", "shared")
    for side in ("original", "quantized"):
        placed = results[side]["placement"]  # none on a CPU host; else its own GPUs
        assert (placed is None) == (results["placement"]["mode"] == "cpu")
    sequence = {}
    for side in ("original", "quantized"):
        levels = results[side]["levels"]
        assert [lv["concurrency"] for lv in levels] == [1, 4]
        for lv in levels:
            assert [run["repeat"] for run in lv["runs"]] == [0, 1]  # default: 2 repeats
            assert lv["completed"] == 2 * lv["num_prompts"] == 16 and lv["failed"] == 0
            for run in lv["runs"]:
                # --ignore-eos: every request generates output_len (32) tokens
                assert run["output_tok_s"] * run["duration_s"] == pytest.approx(8 * 32, rel=0.01)
                for metric in ("ttft", "itl", "e2el"):
                    assert 0 < run[f"{metric}_median_ms"] <= run[f"{metric}_p99_ms"]
                assert run["preemptions"] == 0
                sequence[(lv["concurrency"], run["repeat"], side)] = run["sequence"]
        smoke = results[side]["smoke"]
        assert smoke["chat"]["text"].strip() and smoke["completion"]["text"].strip()
        assert smoke["chat"]["chunks"] > 1  # streamed, not one blob
        # counted from the stream's usage chunk: tiny-llama never ends early (no EOS)
        assert smoke["chat"]["tokens"] == smoke["completion"]["tokens"] == 24
    # A, B then B, A at each level: each pair ran back to back
    order = sorted(sequence, key=sequence.get)
    assert order == [
        (1, 0, "original"), (1, 0, "quantized"), (1, 1, "quantized"), (1, 1, "original"),
        (4, 0, "original"), (4, 0, "quantized"), (4, 1, "quantized"), (4, 1, "original"),
    ]  # fmt: skip
    cmp = results["comparison"]
    assert cmp["paired"] and cmp["repeats"] == 2 and not results["original_cached"]
    for row in cmp["levels"]:
        t = row["output_tok_s"]
        low, high = t["spread"]
        assert low <= t["ratio"] <= high and t["ratio_se"] >= 0
    assert "paired: both served at once, 2 alternating runs" in result.stdout
    assert "out tok/s" in result.stdout and "KV cache (tokens)" in result.stdout


@pytest.mark.cpu_host  # the 1 GiB CPU KV pool
def test_slo_capacity_goodput_and_engine_memory_for_both(served_fp8):
    results, result = served_fp8
    slo = results["slo"]
    assert (slo["ttft_ms"], slo["tpot_ms"], slo["attainment"]) == (1000, 100, 0.9)
    for side in ("original", "quantized"):
        s = slo[side]
        assert set(s["attainment"]) == {"1", "4"}
        assert all(0 <= share <= 1 for share in s["attainment"].values())
        if s["capacity"] is not None:
            assert s["goodput_requests_s"] > 0
        # 1 GiB pool of 128-token blocks (2,048 bytes a token); a 96-token request holds 1
        assert s["memory_bound_concurrency"] == 2**30 // (1 * 128 * 2048) == 4096
        engine = results[side]["engine"]
        # the engine processes' PSS: a vLLM server with torch is hundreds of MiB at least
        assert engine["memory_after_load_bytes"] > 200 * 2**20
        assert engine["memory_after_bench_bytes"] > 200 * 2**20
    assert "SLO: TTFT ≤ 1000 ms and TPOT ≤ 100 ms" in result.stdout
    assert "engine PSS after bench (MiB)" in result.stdout


@pytest.mark.cpu_host
def test_cost_per_million_tokens_and_decode_against_the_host_bound(served_fp8):
    """On this CPU host: the table's host price over the measured tokens/s; the bound from the
    host's measured bandwidth and matmul rate (tiny-llama: overheads dominate, so the engine
    is far below it; the real-shape test checks the ratio where weights dominate)."""
    results, result = served_fp8
    cost, check = results["cost"], results["bound"]
    assert cost["hardware"] == "CPU host" and cost["units"] == {"original": 1, "quantized": 1}
    price = cost["usd_per_hour"]
    levels = {lv["concurrency"]: lv for lv in results["original"]["levels"]}
    for row in cost["levels"]:
        p = row["usd_per_million_output_tokens"]
        tok_s = levels[row["concurrency"]]["output_tok_s"]
        assert p["original"] == pytest.approx(price / (tok_s * 3600) * 1e6)
        lo, hi = p["spread"]  # paired: 2 repeats
        assert lo <= p["ratio"] <= hi
    assert check["hardware"].startswith("this host") and check["context"] == 64 + 32 // 2
    for side in ("original", "quantized"):
        for lv in check[side]:
            assert lv["decode_step_bound_ms"] > 0
            assert 0 < lv["measured_over_bound"] < 1  # no engine beats the bound
    assert "$ per 1M output tokens" in result.stdout
    assert "decode vs the roofline bound" in result.stdout


@pytest.mark.gpu
def test_decode_against_the_gpus_roofline_bound(served_fp8):
    """On a lent GPU of a type in pipeline/planning/gpus.py: its datasheet bound, which no engine
    beats, and the table's price per GPU-hour."""
    results, _ = served_fp8
    check = results["bound"]
    if check is None:
        pytest.skip("this GPU type is not in pipeline/planning/gpus.py: no bound")
    assert not check["hardware"].startswith("this host")
    for side in ("original", "quantized"):
        for lv in check[side]:
            assert 0 < lv["measured_over_bound"] <= 1, (side, lv)
    assert results["cost"]["hardware"] == check["hardware"]


def test_two_serve_settings_keep_their_own_results(served_fp8, session_runs):
    """SWEEP paired, then one repeat against the original that run kept as the reference (one
    server: `--original cached`), then SWEEP again: the third is cached; nothing left running."""
    first, _ = served_fp8
    result = cli("serve", "--recipe", "fp8", *ONE_SIDE, runs=session_runs, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    second = json.loads(results_path(session_runs / "tiny-llama" / "fp8", "serve").read_text())
    assert second["original_cached"] and not second["comparison"]["paired"]
    assert second["comparison"]["repeats"] == 1
    assert second["original"] == first["original"]  # the paired run's original, as measured
    assert "against the cached original (measured alone at another time" in result.stdout
    again = cli("serve", "--recipe", "fp8", *SWEEP, "--json", runs=session_runs)
    assert again.returncode == 0 and "cached" in again.stderr
    (serve,) = [s for s in json.loads(again.stdout)["stages"] if s["stage"] == "serve"]
    assert serve["status"] == "cached"
    assert json.loads(open(serve["paths"]["results"]).read()) == first
    assert vllm_processes() == []


@pytest.mark.parametrize("name", ["fp8", "gptq"])
def test_an_artifact_serves_beside_the_original_where_its_kernel_exists(
    name, request, quantized, session_runs
):
    """`make serve`'s success path for each kind of Linear: FP8 on every host (AVX2 builds
    emulate its scaled_mm; served_fp8's paired run, no server of its own), W4A16 (gptq) where
    the CPU's build has the kernel (AVX-512, GPUs), against the original served_fp8 measured
    (pairing is served_fp8's). Refused elsewhere: the next test."""
    from pipeline.engines.vllm import serving_env

    needs_serving_env()
    if name == "fp8":
        results, result = request.getfixturevalue("served_fp8")
        assert "original model: served beside it, benchmarked alternately" in result.stdout
        assert results["comparison"]["paired"]
    else:
        if not serving_env.capabilities()["w4a16"]:
            pytest.skip("this host's vLLM has no W4A16 CPU kernel (AVX2 only): refusal tested")
        quantized(name), request.getfixturevalue("served_fp8")
        result = cli("serve", "--recipe", name, *ONE_SIDE, runs=session_runs, timeout=1200)
        results = json.loads(results_path(session_runs / "tiny-llama" / name, "serve").read_text())
        assert results["original_cached"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(lv["failed"] == 0 for lv in results["quantized"]["levels"])
    smoke = results["quantized"]["smoke"]
    assert smoke["chat"]["text"].strip() and smoke["completion"]["text"].strip()


def test_w4a16_is_refused_in_one_line_where_the_kernel_is_missing(session_runs):
    """Where the build lacks W4A16 (AVX2): exit 4, saying why, before any server starts."""
    from pipeline.engines.vllm import serving_env

    needs_serving_env()
    if serving_env.capabilities()["w4a16"]:
        pytest.skip("this host's vLLM has the W4A16 CPU kernel: served by the test above")
    result = cli("serve", "--recipe", "gptq", *ONE_SIDE, runs=session_runs)
    assert result.returncode == 4 and "no W4A16" in result.stderr


def test_fp8_kv_cache_doubles_kv_capacity_where_it_runs(quantized, session_runs, tiny_model):
    """fp8-kv serves with kv_cache_dtype fp8: twice the original's KV tokens in the same pool,
    as the planner predicts. vLLM's CPU attention has FP8 KV only with AVX-512/AMX."""
    from pipeline.engines.vllm import serving_env

    needs_serving_env()
    quantized("fp8-kv")
    if not serving_env.capabilities()["fp8_kv_cache"]:
        result = cli("serve", "--recipe", "fp8-kv", *ONE_SIDE, runs=session_runs)
        assert result.returncode == 4 and "FP8 KV cache only with AVX-512" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        pytest.skip("this host's vLLM has no FP8 KV cache on CPU (AVX2 only): refusal checked")
    result = cli("serve", "--recipe", "fp8-kv", *ONE_SIDE, runs=session_runs, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(results_path(session_runs / "tiny-llama" / "fp8-kv", "serve").read_text())
    assert results["original_cached"] and not results["comparison"]["paired"]
    assert "against the cached original (measured alone at another time" in result.stdout
    assert results["quantized"]["engine"]["cache_dtype"].startswith("fp8")
    assert results["comparison"]["memory"]["kv_cache_tokens"]["ratio"] == pytest.approx(
        2.0, rel=0.02
    )
    p = results["predicted"]["quantized"]
    assert p["kv_cache_tokens"] == pytest.approx(p["kv_cache_tokens_measured"], rel=0.02)


def test_engine_sizes_the_fp8_kv_pool_as_planned(quantized, tmp_path, tiny_model):
    """The planner's FP8-KV token count against vLLM's own allocator where FP8 KV cannot serve:
    the engine sizes the KV pool (and logs `… KV cache size: N tokens`) before its attention
    backend is built, so the figure exists even where the CPU attention then refuses FP8
    (AVX2). Where it serves, test_fp8_kv_cache_doubles_kv_capacity_where_it_runs compares the
    same figures from its serve run: no second engine start for it."""
    from pipeline.config.recipe import ServeSettings
    from pipeline.core import procs
    from pipeline.engines.vllm import engine_facts, serving_env
    from pipeline.engines.vllm import server as vllm_server
    from pipeline.planning import kv_cache

    needs_serving_env()
    config = json.loads((tiny_model / "config.json").read_text())
    planned = kv_cache.kv_tokens(
        2**30, geometry.of(config), "fp8", 512, 128, 2048
    )  # max_model_len 512
    assert planned == 1_048_576  # 1 GiB / (4 layers × 2 KV heads × 64 × 2 (K, V) × 1 byte)
    if serving_env.capabilities()["fp8_kv_cache"]:
        pytest.skip("FP8 KV serves here: the serve test compares planner and engine")
    artifact = quantized("fp8-kv") / "artifact"
    settings = ServeSettings(kv_cache_dtype="fp8", enforce_eager=True)
    probe = vllm_server.launch(artifact, "kv-probe", settings, vllm_server.free_port(), 512)
    log = tmp_path / "vllm.log"
    facts: dict = {}
    with procs.group(probe.argv, log, {**os.environ, **probe.env}) as proc:
        deadline = time.monotonic() + 600
        while "kv_cache_tokens" not in facts and time.monotonic() < deadline:
            if proc.poll() is not None:
                facts = engine_facts.from_log(log.read_text())
                break
            time.sleep(1)
            facts = engine_facts.from_log(log.read_text())
    assert not vllm_processes()
    assert facts.get("kv_cache_tokens") == pytest.approx(planned, rel=0.02), procs.tail(log, 30)


def test_port_in_use_is_a_one_line_error(served_fp8, session_runs):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        result = cli("serve", "--recipe", "fp8", "--port", str(port), runs=session_runs)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: port {port} on 127.0.0.1 is already in use; pick another (--port)"
    )


def test_server_killed_mid_benchmark(served_fp8, quantized, tmp_path, session_runs):
    """The quantized model's server dies during `vllm bench serve`: clear message with the
    server log's tail, partial results kept as serve/<fingerprint>.incomplete/, the stage marked
    failed, no process left. Against the original's cached measurement (one server: what a
    paired run adds, the other side's server, is stopped by the same context managers)."""
    quantized("fp8")
    recipe = tmp_path / "fp8-killed.yaml"  # a second fp8 run dir; the original stays cached
    recipe.write_text((REPO / "recipes" / "fp8.yaml").read_text())
    assert cli("quantize", "--recipe", str(recipe), runs=session_runs).returncode == 0
    originals = sorted((session_runs / "tiny-llama" / "original" / "serve").iterdir())
    run = session_runs / "tiny-llama" / "fp8-killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "serve", "--recipe", str(recipe), *ONE_SIDE],
        cwd=REPO,
        env={**_env(session_runs)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not list(run.glob("serve/.*.partial-*/bench-c1-r0.log")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "benchmark never started"
            time.sleep(0.2)
        servers = subprocess.run(
            ["pgrep", "-f", f"vllm.entrypoints.openai.api_server.*{run}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert len(servers) == 1
        subprocess.run(["kill", "-9", servers[0]], check=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    assert proc.returncode == 1, out + err
    assert "vLLM server died mid-benchmark (concurrency 1)" in err
    assert "last lines of" in err  # the server log's tail follows
    manifest = json.loads((run / "manifest.json").read_text())
    entry = manifest["stages"]["serve"]
    assert entry["status"] == "failed"
    kept = run / entry["outputs"]["results"]  # named where it was kept aside, as every path
    assert kept.parent.name.endswith(".incomplete") and all(
        (run / path).exists() for path in entry["outputs"].values()
    )
    partial = json.loads(kept.read_text())
    assert partial["complete"] is False and partial["engine"]["kv_cache_size_tokens"] > 0
    named = re.search(r"last lines of (\S+):", err).group(1)  # where the log is now
    assert named.endswith(".incomplete/server.log") and Path(named).is_file()
    assert sorted((session_runs / "tiny-llama" / "original" / "serve").iterdir()) == originals
    assert vllm_processes() == []


def test_sigterm_during_engine_start_up_stops_everything_in_one_line(
    served_fp8, quantized, tmp_path, session_runs
):
    """SIGTERM to `pipeline serve` alone (Slurm, Kubernetes, `timeout`) while its engine starts:
    it ends within a minute with exit 143 and one line, its vLLM server stopped, its entry
    recorded `interrupted` (Python's default died on the spot: entry `running`, server left)."""
    from pipeline.core.errors import TERMINATED

    quantized("fp8")
    recipe = tmp_path / "fp8-stopped.yaml"  # a run dir of its own; the original stays cached
    recipe.write_text((REPO / "recipes" / "fp8.yaml").read_text())
    assert cli("quantize", "--recipe", str(recipe), runs=session_runs).returncode == 0
    run = session_runs / "tiny-llama" / "fp8-stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "serve", "--recipe", str(recipe), *ONE_SIDE],
        cwd=REPO, env=_env(session_runs), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not list(run.glob("serve/.*.partial-*/server.log")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the engine never started"
            time.sleep(0.2)
        time.sleep(2)  # into vLLM's start-up
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == TERMINATED and "Traceback" not in err
    entry = json.loads((run / "manifest.json").read_text())["stages"]["serve"]
    assert entry["status"] == "interrupted" and entry["error"] == TERMINATED
    assert vllm_processes() == []


def test_bad_artifact_and_startup_timeout_end_cleanly(tmp_path, tiny_model):
    from pipeline.config.recipe import ServeSettings
    from pipeline.core.errors import ServerError
    from pipeline.engines.vllm.server import Server

    needs_serving_env()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["NoSuchModelForCausalLM"]}')
    settings = ServeSettings(enforce_eager=True, startup_timeout_s=300)
    with pytest.raises(ServerError, match="exited during start-up") as err:
        with Server(broken, "broken", settings, tmp_path / "broken.log", 512):
            pass
    assert "last lines of" in str(err.value) and len(str(err.value).splitlines()) > 2
    assert vllm_processes() == []
    quick = ServeSettings(enforce_eager=True, startup_timeout_s=3)
    with pytest.raises(ServerError, match="not healthy after 3 s"):
        with Server(tiny_model, "slow", quick, tmp_path / "slow.log", 512):
            pass
    assert vllm_processes() == []


def _env(runs):
    import os

    return {**os.environ, "RUNS_DIR": str(runs)}


def test_vllm_online_fp8_is_measured_where_the_build_can_else_refused_up_front(session_runs):
    """vllm-fp8: the original served with `--quantization fp8` beside itself served plainly.
    vLLM 0.32's CPU wheel stubs the FP8 activation kernel: there every command that would run
    it exits 4 with one line before anything starts; quantize records the online entry."""
    from pipeline.engines.vllm import serving_env

    needs_serving_env()
    quantize = cli("quantize", "--recipe", "vllm-fp8", runs=session_runs)
    assert quantize.returncode == 0 and "no artifact: vllm serve" in quantize.stdout
    if not serving_env.capabilities()["online_fp8"]:
        for command in (["serve", *SWEEP], ["eval"], ["run", *SWEEP]):
            result = cli(*command, "--recipe", "vllm-fp8", runs=session_runs)
            assert result.returncode == 4, result.stderr[-2000:]
            (line,) = result.stderr.strip().splitlines()
            assert "cannot" in line and "online fp8 (`--quantization fp8`" in line
        assert not (session_runs / "tiny-llama" / "vllm-fp8" / "serve").exists()
        assert vllm_processes() == []
        pytest.skip("this host's vLLM build has no online FP8 kernels: refusal checked")
    result = cli("serve", "--recipe", "vllm-fp8", *SWEEP, runs=session_runs, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    run = session_runs / "tiny-llama" / "vllm-fp8"
    results = json.loads(results_path(run, "serve").read_text())
    assert results["comparison"]["paired"]
    assert results["quantized"]["model_dir"] == results["original"]["model_dir"]  # one checkpoint
    log = (results_path(run, "serve").parent / "server.log").read_text()
    assert "quantization=fp8" in log or "'quantization': 'fp8'" in log


def test_sides_served_one_after_the_other_are_unpaired_and_say_so(
    quantized, tmp_path, monkeypatch, capsys
):
    """What a 70B model on 2 GPUs gets (planning/placement.py: sequential). This host has no
    GPU to make that decision, so the test forces the placement; the servers are real. In a
    runs folder of its own: `advise` reads the session's newest fp8 serve."""
    import dataclasses
    import shutil

    from pipeline.core.runs import Runs
    from pipeline.core.stage import execute
    from pipeline.engines.vllm.placement import Placement
    from pipeline.quantize.request import QuantizeRequest
    from pipeline.quantize.stage import QuantizeStage
    from pipeline.serve.stage import ServeStage

    needs_serving_env()
    runs = tmp_path / "runs"
    shutil.copytree(quantized("fp8"), runs / "tiny-llama" / "fp8")
    monkeypatch.setenv("RUNS_DIR", str(runs))
    q = QuantizeStage.prepare(QuantizeRequest.named("tiny-llama", "fp8"), Runs(runs))
    assert execute(q)[1]  # cached: as in every flow, quantize runs first (it finds the model)
    overrides = {"concurrency": [1], "num_prompts": 2, "repeats": 1, "enforce_eager": True}
    stage = ServeStage.prepare(q, overrides)
    forced = Placement("sequential", stage.placement.sides, "forced by the test")
    entry, cached = execute(dataclasses.replace(stage, placement=forced))
    assert not cached
    results = stage.load_results(entry)
    assert results.placement.mode == "sequential" and not results.comparison.paired
    assert results.original.complete and results.quantized.complete
    assert "serving one after the other: forced by the test" in capsys.readouterr().out
    first = results.original.levels[0].runs[0].sequence
    assert first == results.quantized.levels[0].runs[0].sequence == 0  # each its own run
    # its own servers are gone (the other worker's tests may be serving at the same time)
    assert [p for p in vllm_processes() if str(runs) in p] == []
