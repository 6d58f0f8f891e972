"""The `vllm serve` command line and environment built from the serve settings."""

import os
from pathlib import Path

from pipeline.config.recipe import ServeSettings
from pipeline.engines.vllm import server


def test_command_carries_every_setting():
    s = ServeSettings(kv_cache_dtype="fp8", tensor_parallel_size=2, enforce_eager=True, seed=3)
    cmd = server.launch(Path("/m"), "name", s, 8123, 2048).argv
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert cmd[2] == "vllm.entrypoints.openai.api_server"
    assert flags["--model"] == "/m" and flags["--port"] == "8123" and flags["--host"] == "127.0.0.1"
    assert flags["--kv-cache-dtype"] == "fp8" and flags["--tensor-parallel-size"] == "2"
    assert flags["--max-model-len"] == "2048" and flags["--seed"] == "3"
    assert cmd[-1] == "--enforce-eager"
    assert "--enforce-eager" not in server.launch(Path("/m"), "n", ServeSettings(), 1, 1).argv


def test_cpu_settings_go_to_the_environment():
    env = server.environment(ServeSettings(cpu_kvcache_space_gib=2.5, cpu_omp_threads_bind="0-1"))
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2.5" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the model in the engine's process


def test_first_error_line_is_the_root_cause(tmp_path):
    """As vLLM 0.32's CPU build logs an FP8 MoE artifact it cannot run (seen on this host)."""
    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=1) WARNING 11-30 15:20:18 [system_utils.py:255] Found ulimit of 20000 "
        "… fd limit errors like `OSError: [Errno 24] Too many open files`.\n"
        "(Worker pid=2) ERROR 11-30 15:20:38 [multiproc_executor.py:953]     raise "
        'ValueError(f"Unsupported FP8 MoE backend: {fp8_backend.value}")\n'
        "(Worker pid=2) ERROR 11-30 15:20:38 [multiproc_executor.py:953] ValueError: "
        "Unsupported FP8 MoE backend: NONE\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    assert server.first_error(log) == "ValueError: Unsupported FP8 MoE backend: NONE"
    assert server.first_error(tmp_path / "absent.log") is None
    log.write_text("INFO all fine\n")
    assert server.first_error(log) is None


def test_pipeline_stages_run_on_vllms_multiprocessing_executor():
    """Serve keeps every stage on this node, where vLLM 0.32's `mp` executor runs pipeline
    parallelism (supports_pp); `ray` asserts Ray importable, and the CUDA serving env has none."""
    staged = server.launch(Path("/m"), "n", ServeSettings(pipeline_parallel_size=2), 1, 1).argv
    flags = dict(zip(staged[3::2], staged[4::2], strict=False))
    assert flags["--pipeline-parallel-size"] == "2"
    assert flags["--distributed-executor-backend"] == "mp" and "ray" not in staged
    one_stage = server.launch(Path("/m"), "n", ServeSettings(), 1, 1).argv
    assert "--distributed-executor-backend" not in one_stage  # vLLM picks uni / mp itself


# vLLM's own `vllm serve` parser, its command not dispatched: what the pasted line would start
AS_VLLM_PARSES = """
import json, sys
from vllm.entrypoints.cli import main, serve
serve.ServeSubcommand.cmd = staticmethod(lambda a: print(json.dumps({"model": a.model_tag
    or a.model, "port": a.port, "tp": a.tensor_parallel_size, "name": a.served_model_name})))
sys.argv = sys.argv[1:]
main.main()
"""


def test_the_dry_runs_launch_line_is_what_vllm_serve_parses(tmp_path):
    """`make serve --dry-run` shows each side's launch as one would paste it: the serving env's
    `vllm serve` with the model first (vLLM 0.32 deprecates --model there) and a real port."""
    import json
    import shlex
    import subprocess

    import pytest

    from pipeline.engines.vllm.serving_env import SERVE_PYTHON, available

    if not available():
        pytest.skip("serving env not built (make setup)")
    s = ServeSettings(tensor_parallel_size=1, kv_cache_dtype="fp8")
    line = server.launch(tmp_path / "m m", "tiny-llama-fp8", s, 8001, 1024).shell()
    words = shlex.split(line)
    variables = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    argv = words[len(variables) :]
    assert argv[:2] == [str(SERVE_PYTHON.parent / "vllm"), "serve"]
    done = subprocess.run([str(SERVE_PYTHON), "-c", AS_VLLM_PARSES, *argv], capture_output=True,
                          text=True, env={**os.environ, **variables}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed == {"model": str(tmp_path / "m m"), "port": 8001, "tp": 1,
                      "name": ["tiny-llama-fp8"]}  # fmt: skip
    assert "positional argument" not in done.stderr  # no deprecation said
