"""`python -m pipeline …` for the tests, forked from a process that has imported the heavy
libraries once (a zygote, as Android's and Chromium's), instead of a fresh interpreter that
imports them again: llm-compressor alone takes 14 s of CPU here, and a test run makes ~100 such
calls on two cores.

The child is the same CLI in its own process: its own argv, environment, working directory,
stdin (/dev/null), stdout and stderr (pipes read here), exit code and signals; it runs
`pipeline/__main__.py` as `python -m pipeline` does (runpy, `__main__` swapped). What it
inherits is only what a fresh process would have imported anyway, loaded with the same
environment: a call whose environment differs in a variable the libraries read at import
(HF_*, OMP_*, …) runs as a fresh process instead (`Zygote.fits`).
Peak RSS is not a fresh process's (pages shared with the zygote count differently: 0.45 GiB
forked, 0.56 fresh for tiny-llama's fp8): tests that measure memory ask for a fresh process
(`cli(..., fresh=True)`).

    python -m tests.zygote SOCKET      # the server; tests/conftest.py starts one per worker
"""

import atexit
import json
import locale
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Read by the preloaded libraries at import (huggingface_hub's endpoint and cache paths, torch's
# and OpenMP's threads, llm-compressor's logging, the interpreter's own): a call whose
# environment differs from the zygote's in one of them runs as a fresh process
IMPORT_TIME = (
    "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "DATASETS_", "TORCH", "PYTORCH_", "CUDA", "OMP_",
    "MKL_", "KMP_", "LLM_COMPRESSOR_", "ACCELERATE_", "LOGURU_", "XDG_", "HOME", "PYTHON", "LD_",
    "LMEVAL_", "SKLEARN_",
)  # fmt: skip
START_TIMEOUT_S = 300


def _preload() -> None:
    """What a quantize or an eval imports first (eval never imports llm-compressor, quantize
    never lm-eval, but each only adds modules: llm-compressor's logging stays off, as the
    pipeline imports it; lm-eval's is set up when it runs, not at import)."""
    import datasets  # noqa: F401
    import lm_eval.models.huggingface  # noqa: F401  (the hf eval's tasks run in its process)
    import lm_eval.tasks  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from pipeline.core.quiet import import_llmcompressor

    import_llmcompressor()


def _serve(path: str, set_by_imports: dict) -> tuple[dict, list[int]]:
    """Accept calls one at a time; returns only in a forked child, with its request."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".tmp")
    Path(path + ".env").write_text(json.dumps(set_by_imports))
    os.rename(path + ".tmp", path)  # ready once it exists
    listener.listen(8)
    listener.settimeout(5)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test worker is gone
                sys.exit(0)
            continue
        conn.settimeout(None)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        request = json.loads(message)
        sys.stdout.flush(), sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close(), conn.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        conn.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
        conn.close()


def _become(request: dict, fds: list[int]) -> None:
    """The forked child: the call's stdio, directory, environment and argv."""
    out, err = fds
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]  # runpy sets argv[0] to pipeline/__main__.py


class Zygote:
    """Client: one server per test process, started on first use."""

    def __init__(self, repo: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="zygote-"))
        self.path = self.folder / "socket"
        self.env = dict(os.environ)
        self.set_by_imports: dict = {}  # what the libraries put in their own environment
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote", str(self.path)],
            cwd=repo,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=open(self.folder / "zygote.log", "w"),
            stderr=subprocess.STDOUT,
        )
        atexit.register(self.close)
        self.ready = self._wait_ready()

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        self.set_by_imports = json.loads(Path(f"{self.path}.env").read_text())
        return True

    def fits(self, env: dict) -> bool:
        """No variable the libraries read at import differs from the zygote's environment;
        what they set there themselves (KMP_INIT_AT_FORK, …) may be present or not: the test
        process has it too once it imports torch itself."""
        if not self.ready or self.proc.poll() is not None:
            return False
        for key in set(env) | set(self.env):
            if key in self.set_by_imports:
                if env.get(key, self.set_by_imports[key]) != self.set_by_imports[key]:
                    return False
            elif key.startswith(IMPORT_TIME) and env.get(key) != self.env.get(key):
                return False
        return True

    def run(self, args: list[str], env: dict, cwd: Path, timeout: float):
        """`python -m pipeline ARGS`, as subprocess.run(capture_output=True, text=True,
        timeout=timeout) would run it."""
        argv = [sys.executable, "-m", "pipeline", *args]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(str(self.path))
            # as a fresh process would have it after its imports
            request = {"args": args, "env": self.set_by_imports | env, "cwd": str(cwd)}
            socket.send_fds(conn, [json.dumps(request).encode()], [out_w, err_w])
            os.close(out_w), os.close(err_w)
            pid = self._reply(conn)["pid"]
            out, err, timed_out = _read_until_closed(out_r, err_r, pid, timeout)
            returncode = self._reply(conn)["returncode"]
        out, err = _text(out), _text(err)
        if timed_out:
            raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(argv, returncode, out, err)

    def _reply(self, conn: socket.socket) -> dict:
        message = conn.recv(4096)
        if not message:
            raise RuntimeError(f"the test zygote died during a call: {self.folder}/zygote.log")
        return json.loads(message)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for name in ("socket", "socket.env", "zygote.log"):
            (self.folder / name).unlink(missing_ok=True)
        self.folder.rmdir()


def _read_until_closed(out_fd: int, err_fd: int, pid: int, timeout: float):
    """Both pipes to their end; the child killed (SIGKILL, as subprocess does) at timeout."""
    chunks = {out_fd: [], err_fd: []}
    deadline = time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0 and not timed_out:
                timed_out = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for key, _ in sel.select(None if timed_out else max(left, 0)):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd]), timed_out


def _text(data: bytes) -> str:
    """Decoded as subprocess's text mode does (universal newlines)."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    before = dict(os.environ)
    _preload()
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}
    call, pipes = _serve(sys.argv[1], imported)
    _become(call, pipes)
    runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
