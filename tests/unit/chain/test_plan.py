"""`run|eval|serve --dry-run`: the chain's plan from the config alone, in a second, with no
torch; what this host cannot do is refused (exit 4) before anything is downloaded or loaded."""

import json
from pathlib import Path

import pytest

from pipeline.chain import plan as chain_plan
from pipeline.cli.main import main
from pipeline.core.runs import Runs
from tests.unit.cli.test_main import _probe

GIB = 2**30


@pytest.fixture(autouse=True)
def _roomy_disk(monkeypatch):
    """Plans here stand on a 10 TiB disk, whatever this host has free (CI's had 20 GiB: a
    serve plan of llama3-8b was refused for disk); the disk tests set their own."""
    monkeypatch.setattr(chain_plan, "free_bytes", lambda path: 10 * 2**40)


def _plan(capsys, monkeypatch, tmp_path, *argv) -> tuple[int, dict]:
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    code = main([*argv, "--dry-run", "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{") :])


@pytest.mark.cpu_host  # the hf eval in float32 RAM
def test_llama3_70b_fp8_chain_on_this_cpu_host(capsys, monkeypatch, tmp_path):
    code, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-70b",
                       "--recipe", "fp8")  # fmt: skip
    stages = plan["stages"]
    assert list(stages) == ["quantize", "eval", "serve"]
    files = dict(map(tuple, stages["quantize"]["files"]))
    assert files["original (hub cache)"] == pytest.approx(141.1e9, rel=0.01)
    assert files["artifact"] == pytest.approx(72.7e9, rel=0.01)
    assert stages["quantize"]["cpu_ram_bytes"] < 10 * GIB  # model-free: shards, not the model
    # with vLLM on 80 GB GPUs: the original on two; the FP8 artifact's eval engine (vllm.LLM,
    # 4 windows: ~1 GiB of engine memory) on one, its `vllm serve` (8,192 tokens profiled:
    # 3.4 GiB) on two — on one, vLLM's engine leaves 0.23 GiB of KV, under 16 × 192 tokens'
    assert stages["eval"]["on_gpus"]["original"]["tensor_parallel_size"] == 2
    assert stages["eval"]["on_gpus"]["fp8"]["tensor_parallel_size"] == 1
    serve = stages["serve"]["engines"]
    assert serve["original"]["on_gpus"]["tensor_parallel_size"] == 2
    fp8 = serve["fp8"]["on_gpus"]
    assert fp8["tensor_parallel_size"] == 2
    engine = fp8["engine_memory"]  # per GPU at TP 2, each part shown
    assert engine["max_num_batched_tokens"] == 8192 and engine["max_num_seqs"] == 1024
    assert engine["total_bytes"] == pytest.approx(2.66 * GIB, rel=0.02)
    # a 24 GiB CPU host can quantize it, but neither evaluate nor serve it: exit 4, named
    assert code == 4 and any("eval (hf, float32 on CPU)" in r for r in plan["refusals"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.cpu_host  # backend auto is hf on a CPU
def test_tiny_llama_fits_and_says_so(capsys, monkeypatch, tmp_path):
    code, plan = _plan(capsys, monkeypatch, tmp_path, "eval", "--recipe", "gptq")
    assert code == 0 and plan["refusals"] == []
    assert list(plan["stages"]) == ["quantize", "eval"]
    assert plan["stages"]["eval"]["backend"] == "hf"
    (place,) = plan["disk"]  # tiny-llama is built here: nothing downloaded
    assert 0 < place["total_bytes"] < place["free_bytes"]


def test_disk_short_of_the_chain_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(chain_plan, "free_bytes", lambda path: GIB)
    code, plan = _plan(capsys, monkeypatch, tmp_path, "serve", "--model", "llama3-8b",
                       "--recipe", "fp8")  # fmt: skip
    assert code == 4
    assert any(r.startswith("disk: the chain writes ~") for r in plan["refusals"])


def test_a_runs_folder_nobody_can_write_is_refused_as_such(capsys, monkeypatch, tmp_path):
    """/proc's free space is 0 GiB, but that is not why nothing can go there (root's permission
    bits say it may write anything: the plan tries)."""
    monkeypatch.setenv("RUNS_DIR", "/proc/nope")
    code = main(["quantize", "--recipe", "fp8", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 4 and "at a bigger disk" not in out + err
    (line,) = err.strip().splitlines()  # the refusal, said once: the plan above leaves it out
    assert "/proc cannot be written by this user; point RUNS_DIR at a folder that can" in line
    assert "cannot be written" not in out
    assert not list(Path("/proc").glob(".plan-probe-*"))


def test_a_disk_refusal_names_the_variable_that_moves_the_files(monkeypatch, tmp_path):
    """With RUNS_DIR in object storage the stages write its mirror under PIPELINE_CACHE:
    pointing RUNS_DIR elsewhere would not free a byte there."""
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    assert chain_plan._fix({str(tmp_path / "runs")}, Runs.from_env()) == "RUNS_DIR"
    monkeypatch.setenv("RUNS_DIR", "s3://bucket/runs")
    mirrored = Runs.from_env()
    assert mirrored.local.is_relative_to(tmp_path / "cache")
    assert chain_plan._fix({str(mirrored.local)}, mirrored) == "PIPELINE_CACHE"


def _measured_quantize(
    tmp_path, model: str, mib_s: float, bf16_bytes: int, recipe: str = "fp8", **more
) -> None:
    """An earlier quantize on this host (model-free fp8 unless `more` says otherwise), as its
    manifest records it."""
    from pipeline.core import environment

    run = tmp_path / "runs" / model / recipe
    run.mkdir(parents=True)
    metrics = {"path": "model-free", "bytes_per_second": mib_s * 2**20, "bf16_bytes": bf16_bytes,
               "modifiers": ["QuantizationModifier"], "calibration_samples": 0, **more}  # fmt: skip
    entry = {
        "ended": "2026-12-01T00:00:00",
        "environment": {"hostname": environment.host()["hostname"]},
        "metrics": metrics,
    }
    (run / "manifest.json").write_text(json.dumps({"stages": {"quantize": entry}}))


def test_the_time_estimate_uses_this_hosts_measured_rate(capsys, monkeypatch, tmp_path):
    _measured_quantize(tmp_path, "other", 100, 2**33)
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                    "--recipe", "fp8", "--stages", "eval")  # fmt: skip
    time = plan["stages"]["quantize"]["time"]
    assert time.startswith("~3 min"), time  # 16.06 GB of bf16 weights at 100 MiB/s: 153 s
    assert "measured: 100 MiB/s" in time


def test_a_rate_is_taken_from_the_same_algorithm_and_scaled_by_its_samples(
    capsys, monkeypatch, tmp_path
):
    """GPTQ's rate made AutoRound's plan ~47 s on SmolLM2, where its first layer alone took over
    11 min; a 32-sample GPTQ's made the 512-sample one's 16× too short. Processes split it
    (--nproc given: a GPU host's default is one per visible GPU)."""
    gptq = {"path": "oneshot", "modifiers": ["GPTQModifier"], "calibration_samples": 32}
    _measured_quantize(tmp_path, "other", 8, 2**33, "gptq", **gptq)
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                    "--recipe", "autoround", "--stages", "eval")  # fmt: skip
    said = plan["stages"]["quantize"]["time"]
    assert said.startswith("unknown: no AutoRoundModifier quantize on this path"), said
    one = 16.06e9 / (8 * 2**20 * 32 / 512)
    for nproc in (1, 2):
        _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                        "--recipe", "gptq", "--stages", "eval", "--nproc", str(nproc))  # fmt: skip
        quantize = plan["stages"]["quantize"]
        said = quantize["time"]
        assert f"{0.5 * nproc:g} MiB/s of bf16 weights at 512 samples asked" in said, said
        assert ("split over 2 processes" in said) == (nproc == 2), said
        assert quantize["time_seconds"] == pytest.approx(one / nproc, rel=0.01)


def test_a_tiny_models_rate_is_not_scaled_to_a_large_one(capsys, monkeypatch, tmp_path):
    """tiny-llama's quantize is mostly start-up: 5 MiB/s from it made Llama-3-70B's ~7.8 h."""
    _measured_quantize(tmp_path, "tiny-llama", 5, 20 * 2**20)
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-70b",
                    "--recipe", "fp8", "--stages", "eval")  # fmt: skip
    quantize = plan["stages"]["quantize"]
    assert quantize.get("time_seconds") is None
    assert quantize["time"].startswith("unknown: only models too small"), quantize["time"]


def test_the_chain_plan_imports_no_torch(tmp_path):
    result, last = _probe(tmp_path, "run", "--model", "llama3-70b", "--recipe", "fp8",
                          "--dry-run")  # fmt: skip
    assert last.startswith("HEAVY= CODE="), result.stderr[-2000:]
    assert "chain plan: llama3-70b × fp8" in result.stdout


def test_eval_and_serve_time_are_measured_overheads_plus_the_bound(capsys, monkeypatch, tmp_path):
    """Given this host's rates and an earlier eval's and serve's overheads (written as the
    stages write them), the estimate is their sum with the bound of this run's work."""
    from pipeline.core.files import write_json_atomic
    from pipeline.perf import host, timing

    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("pipeline.core.environment.gpus", lambda: [])
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                    "--recipe", "fp8")  # fmt: skip
    assert plan["stages"]["eval"]["time_seconds"] is None  # no rates measured here yet
    assert plan["stages"]["eval"]["time"].startswith("unknown")
    rates = {"bytes_s": 20e9, "flops_s": 100e9, "threads": 2, "cpu_model": "test",
             "memory_bytes": 24 * GIB, "measured": "2026-12-01"}  # fmt: skip
    write_json_atomic(host._path(), rates)
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                    "--recipe", "fp8")  # fmt: skip
    bound_only = plan["stages"]["eval"]["time_seconds"]
    assert bound_only > 0 and "≥ the bound" in plan["stages"]["eval"]["time"]
    timing.record("eval-hf", {"seconds": 30.0, "model": "tiny", "tasks_seconds": 20.0})
    timing.record("serve", {"seconds": 60.0, "model": "tiny", "step_seconds": {"1": 0.0}})
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                    "--recipe", "fp8")  # fmt: skip
    # the recipe has an lm-eval task: its measured time is added, as a floor
    assert plan["stages"]["eval"]["time_seconds"] == pytest.approx(bound_only + 30 + 20)
    serve = plan["stages"]["serve"]
    assert serve["time_seconds"] > 60 and "measured overheads (60 s, tiny)" in serve["time"]
    # the model's own overheads first (they go with its layers), each forward's cost counted
    timing.record("eval-hf:llama3-8b", {"seconds": 5.0, "step_seconds": 0.5, "model": "llama3-8b",
                                        "tasks_seconds": 20.0})  # fmt: skip
    _, plan = _plan(capsys, monkeypatch, tmp_path, "run", "--model", "llama3-8b",
                    "--recipe", "fp8")  # fmt: skip
    eval_time = plan["stages"]["eval"]["time"]
    assert "measured overheads" in eval_time and "llama3-8b)" in eval_time
    added = plan["stages"]["eval"]["time_seconds"] - bound_only - 20
    assert added > 5 + 0.5 * 10  # setup + its forwards: more than a few at the shipped settings
    assert "where the original's side is stored" in eval_time  # nothing stored: the full figure


def test_serve_dry_run_shows_each_sides_launch_with_the_parallel_sizes_asked(
    capsys, monkeypatch, tmp_path
):
    """`serve --pipeline-parallel-size 2 --dry-run --json` on 8 × H100 (the stand-in): each side
    as the stage would start it — its GPUs, TP × PP and vLLM's `mp` executor (one node: no Ray,
    which the CUDA serving env does not have)."""
    from pipeline.engines.vllm import serving_env
    from tests.conftest import stamped_serving_env
    from tests.unit.core.test_devices import standin

    standin(monkeypatch, "h100x8")
    # the CUDA build a GPU host's make setup installs (this host's CPU build is refused there)
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", stamped_serving_env(tmp_path / "cuda", "cuda"))
    code, plan = _plan(capsys, monkeypatch, tmp_path, "serve", "--model", "llama3-8b",
                       "--recipe", "fp8", "--pipeline-parallel-size", "2")  # fmt: skip
    assert code == 0, plan["refusals"]
    serve = plan["stages"]["serve"]
    seen = set()
    for side in ("original", "quantized"):
        launch = serve["launches"][side]
        argv = launch["argv"]
        flags = dict(zip(argv[3::2], argv[4::2], strict=False))
        assert flags["--pipeline-parallel-size"] == "2"
        assert flags["--distributed-executor-backend"] == "mp" and "ray" not in argv
        gpus = launch["env"]["CUDA_VISIBLE_DEVICES"].split(",")
        assert len(gpus) == 2 * int(flags["--tensor-parallel-size"]) and not seen & set(gpus)
        seen |= set(gpus)
        assert launch["command"].startswith(f"CUDA_VISIBLE_DEVICES={','.join(gpus)} ")
        assert serve["placement"]["sides"][serve_label(side)]["pipeline_parallel_size"] == 2
    assert serve["engines"]["original"]["pipeline_parallel_size"] == 2


def serve_label(side: str) -> str:
    return "original" if side == "original" else "fp8"


def test_serve_dry_run_refuses_a_tensor_parallel_size_vllm_would_in_one_line(
    capsys, monkeypatch, tmp_path
):
    from tests.unit.core.test_devices import standin

    standin(monkeypatch, "h100x8")
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    code = main(["serve", "--model", "llama3-8b", "--recipe", "fp8", "--tensor-parallel-size",
                 "3", "--dry-run"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tensor" in err[0].lower(), err


def test_a_parallel_size_on_a_cpu_host_is_refused_once_and_a_launch_pastes(
    capsys, monkeypatch, tmp_path
):
    """No GPU: the pipeline serves each side as one CPU engine, so TP 2 is refused (exit 4), in
    the error line only; without it, each launch line is the real model folder, a real port."""
    from pipeline.models.tiny.build import cached_path
    from tests.conftest import as_cpu_host

    as_cpu_host(monkeypatch, tmp_path / "serve-cpu")
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    argv = ["serve", "--model", "tiny-llama", "--recipe", "fp8", "--dry-run"]
    assert main([*argv, "--tensor-parallel-size", "2"]) == 4
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert line.startswith("error: tensor_parallel_size 2 × pipeline_parallel_size 1: no GPU")
    assert "no GPU" not in out  # said once
    assert main(argv) == 0
    launches = [x for x in capsys.readouterr().out.splitlines() if "launch" in x]
    assert f"vllm serve {cached_path()} " in launches[0] and "--port 8000" in launches[0]
    assert "--port 8001" in launches[1] and "--model" not in "".join(launches)


def test_an_online_recipes_dry_run_says_nothing_was_checked(capsys, monkeypatch, tmp_path):
    """vLLM quantizes an online recipe as it loads: no artifact, no quantize time, and no
    "fits" where this host's memory was never asked."""
    monkeypatch.setenv("RUNS_DIR", str(tmp_path / "runs"))
    code = main(
        ["quantize", "--model", "tiny-llama", "--recipe", "vllm-fp8", "--dry-run", "--json"]
    )
    out = capsys.readouterr().out
    plan = json.loads(out[out.index("{") :])
    assert code == 0 and plan["host_fit"].startswith("not checked: an online recipe")
    assert plan["files"] == [] and plan["time"] == "nothing to quantize ahead (online)"
