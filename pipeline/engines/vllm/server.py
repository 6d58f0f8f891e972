"""`vllm serve` as a context manager: an OpenAI-compatible server on 127.0.0.1, started from
the serving env in its own process group, waited on until /health answers, always stopped.

    with Server(model_dir, "tiny-llama-fp8", settings, log_path) as server:
        server.url  # http://127.0.0.1:<port>

Start-up failures (port taken, bad artifact, out of memory, time-out, the process exiting) raise
ServerError with the last lines of the server log.
"""

import os
import re
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.samples import Sample

from pipeline.config.recipe import ServeSettings
from pipeline.core import procs
from pipeline.core.devices import Gpu
from pipeline.core.errors import ServerError, UserError
from pipeline.engines.vllm import engine_facts, engine_memory
from pipeline.engines.vllm.serving_env import SERVE_PYTHON
from pipeline.engines.vllm.startup_phases import StartupPhases
from pipeline.quantize import artifact

HOST = "127.0.0.1"
# The slowest sustained read a start-up is allowed on top of startup_timeout_s: a network volume's
# baseline (AWS gp3's default throughput is 125 MiB/s); local NVMe reads ten times that.
READ_FLOOR_BPS = 125 * 2**20
# vLLM's CPU build prints this on a normal shutdown (seen with 0.32): not an error to show
SHUTDOWN_NOISE = "terminate called without an active exception"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
            return False
        except OSError:
            return True


def environment(s: ServeSettings, gpus: tuple[Gpu, ...] = ()) -> dict[str, str]:
    """The variables the server's process gets beside the caller's own."""
    if gpus:
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in gpus),
            # vLLM reads integer entries as NVML's (nvidia-smi's) indices (platforms/cuda.py);
            # the CUDA runtime orders fastest-first unless told the PCI bus order
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
    env = {
        "VLLM_CPU_KVCACHE_SPACE": f"{s.cpu_kvcache_space_gib:g}",
        # the model runs in the engine process, not a third process that imports vLLM again:
        # healthy in 0.69× the time, decode alike within noise (benchmarks/engine_startup.py)
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    if s.cpu_omp_threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = s.cpu_omp_threads_bind
    return env


@dataclass(frozen=True)
class Launch:
    """How one vLLM server starts: what `make serve --dry-run` shows and Server runs."""

    argv: list[str]
    env: dict[str, str]

    def shell(self) -> str:
        """As one would paste it: the serving env's `vllm serve` with the model first (as
        vLLM 0.32 asks), and every variable the launch sets (the GPUs and their order, the
        CPU KV pool)."""
        args = self.argv[3:]  # past python -m vllm.entrypoints.openai.api_server
        at = args.index("--model")
        args = [args[at + 1], *args[:at], *args[at + 2 :]]
        variables = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        vllm = Path(self.argv[0]).parent / "vllm"
        return " ".join([*variables, shlex.quote(str(vllm)), "serve", *map(shlex.quote, args)])


def launch(
    model_dir: Path,
    name: str,
    s: ServeSettings,
    port: int | str,
    max_len: int,
    extra: Sequence[str] = (),
    gpus: tuple[Gpu, ...] = (),
) -> Launch:
    """The server's argv and environment: a pure function of the side and its GPUs."""
    cmd = [
        str(SERVE_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",  # the CPU wheel's `vllm` script cannot start
        "--model",
        str(model_dir),
        "--served-model-name",
        name,
        "--host",
        HOST,
        "--port",
        str(port),
        "--seed",
        str(s.seed),
        "--dtype",
        s.dtype,
        "--kv-cache-dtype",
        s.kv_cache_dtype,
        "--max-model-len",
        str(max_len),
        "--tensor-parallel-size",
        str(s.tensor_parallel_size),
        "--pipeline-parallel-size",
        str(s.pipeline_parallel_size),
        "--gpu-memory-utilization",
        str(s.gpu_memory_utilization),
    ]
    if s.pipeline_parallel_size > 1:
        # serve places every stage on this node, where vLLM's multiprocessing executor runs
        # pipeline parallelism; `ray` would assert Ray importable, and the serving env has none
        cmd += ["--distributed-executor-backend", "mp"]
    if s.expert_parallel:  # whole experts per rank: a TP whose expert split vLLM would refuse
        cmd.append("--enable-expert-parallel")
    argv = cmd + (["--enforce-eager"] if s.enforce_eager else []) + list(extra)
    return Launch(argv, environment(s, gpus))


class Server:
    def __init__(
        self,
        model_dir: Path,
        name: str,
        settings: ServeSettings,
        log_path: Path,
        max_model_len: int,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        gpus: tuple[Gpu, ...] = (),
    ):
        if port is not None and port_in_use(port):
            raise UserError(f"port {port} on {HOST} is already in use; pick another (--port)")
        self.port = port or free_port()
        self.name = name
        self.url = f"http://{HOST}:{self.port}"
        self.log_path = log_path
        started = launch(model_dir, name, settings, self.port, max_model_len, extra_args, gpus)
        self.cmd, self.env = started.argv, {**os.environ, **started.env}
        self.base_timeout = settings.startup_timeout_s
        self.reading(artifact.tensor_bytes(model_dir))
        self.proc: subprocess.Popen | None = None  # from start() to stop()
        self.ready_seconds: float | None = None

    def reading(self, read_bytes: int) -> None:
        """Allow start-up the time to read `read_bytes` from disk (this server's checkpoint, or
        every checkpoint being loaded at once from one disk) at READ_FLOOR_BPS, on top of
        startup_timeout_s: two 70B servers read ~280 GB, where a flat timeout was cut short."""
        self.read_bytes = read_bytes
        self.timeout = self.base_timeout + read_bytes / READ_FLOOR_BPS

    def __enter__(self) -> "Server":
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Launch without waiting: two servers start side by side (start-up is minutes on CPU)."""
        self._group = procs.group(self.cmd, self.log_path, self.env)
        self.proc = self._group.__enter__()
        self._started = time.monotonic()

    def stop(self) -> None:
        if self.proc is not None:
            self._group.__exit__(None, None, None)
            self.proc = None

    def memory_bytes(self) -> int | None:
        """The server's and its engine processes' PSS (see engine_memory)."""
        if self.proc is None or not self.alive():
            return None
        return engine_memory.tree_pss_bytes(self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self) -> None:
        if self.ready_seconds is not None:
            return
        if self.proc is None:
            raise RuntimeError(f"{self.name}: wait_healthy() before start()")
        start = self._started
        phases = StartupPhases(self.log_path, self.name, start)
        while time.monotonic() - start < self.timeout:
            phases.poll()
            if self.proc.poll() is not None:
                raise ServerError(
                    f"vLLM server exited during start-up (exit {self.proc.returncode}); "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            if get(f"{self.url}/health", timeout=2) is not None:
                self.ready_seconds = round(time.monotonic() - start, 2)
                return
            time.sleep(1)
        read = f"{self.read_bytes / 1e9:.1f} GB read at {READ_FLOOR_BPS / 2**20:.0f} MiB/s"
        raise ServerError(
            f"vLLM server not healthy after {self.timeout:.0f} s (startup_timeout_s "
            f"{self.base_timeout} + {read}); last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 15) -> str:
        """The log's first error line (the root cause; what follows is often its echo in the
        engine's other processes), then its last lines."""
        tail = procs.tail(self.log_path, lines + 5).splitlines()
        kept = "\n".join(line for line in tail if SHUTDOWN_NOISE not in line)[-4000:]
        first = first_error(self.log_path)
        return f"first error: {first}\n{kept}" if first else kept

    def metrics(self) -> list[Sample]:
        """vLLM's samples of /metrics (engine_facts.samples: prometheus_client's parser)."""
        return engine_facts.samples(get(f"{self.url}/metrics", timeout=5) or "")


# An exception's own line, maybe behind vLLM's process and log-level prefixes:
# "(Worker pid=7) ERROR 11-30 15:20:38 [multiproc_executor.py:953] ValueError: …"
ERROR_LINE = re.compile(
    r"^(?:\([^)]*\)\s+)?(?:(?:ERROR|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s+)?"
    r"(?P<error>(?:\w+\.)*\w*(?:Error|Exception): .*)$"
)


def first_error(log_path: Path) -> str | None:
    """The first exception line of a log (its root cause, usually), without vLLM's prefixes."""
    if not Path(log_path).is_file():
        return None
    for line in Path(log_path).read_text(errors="replace").splitlines():
        found = ERROR_LINE.match(line.strip())
        if found:
            return found["error"][:500]
    return None


def get(url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode() if r.status == 200 else None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None
