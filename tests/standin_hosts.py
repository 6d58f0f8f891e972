"""`make test-gpu-hosts`: tests/unit as `make test` runs them on GPU hosts, on a host without one.

    python -m tests.standin_hosts [--all] [pytest args…]

On a GPU host `make test` gives each test worker GPUs of its own (tests/parallel.py), and
`make setup` has built the serving env with vLLM's CUDA build (its `.installed-cuda` stamp).
Here the GPUs are the stand-in nvidia-smi's (tests/gpu_hosts, first on PATH) and the serving env
is this checkout's .venv-serve linked under a `.installed-cuda` stamp (tests.conftest's
stamped_serving_env: its python is still this host's build, so nothing starts vLLM on a GPU;
what reads the build reads the stamp). Two hosts, two workers each, as `make test` splits them:

1. 1 × H200 (h200x1), the worker without a GPU: `CUDA_VISIBLE_DEVICES=""`, where a one-GPU host
   runs its unit tests (the worker holding the GPU takes the e2e tests first and never gets to
   them). All of tests/unit; the stand-in records which tests asked it for GPUs (STANDIN_LOG),
   directly or through a command they started.
2. 8 × H100 (h100x8), GPUs 0-3 and 4-7: the tests of step 1's record. The other unit tests
   never asked for a GPU, so nothing of theirs depends on how many there are (what only reads
   the serving env's build stamp is covered by step 1). A unit test marked `gpu` would skip in
   step 1 and not be recorded (there is none). --all runs all of tests/unit here too.

Exit 0 when both pass and no process a test started is still running after its step (named,
then killed). The seconds each step took are printed (CI's log keeps them).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.conftest import REPO, stamped_serving_env

STANDIN = REPO / "tests" / "gpu_hosts"


def _pytest(paths: list[str], env: dict, extra: list[str]) -> int:
    cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "-n", "2",
           "--dist", "loadgroup", *extra]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


def touched(log: Path) -> list[str]:
    """The tests (node ids) that, or whose fixtures or commands, asked the stand-in for GPUs:
    PYTEST_CURRENT_TEST is "<node id> (<phase>)"."""
    lines = log.read_text().splitlines() if log.is_file() else []
    ids = {line.rsplit(" (", 1)[0] for line in lines if line.startswith("tests/unit/")}
    return sorted(i for i in ids if (REPO / i.split("::", 1)[0]).is_file())


def left_behind(mark: str) -> list[str]:
    """Processes still running that inherited this step's STANDIN_STEP (anything a test started
    and did not end: on a GPU host, a process holding GPU memory), killed after being named."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if f"STANDIN_STEP={mark}".encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            found.append(f"{proc.name} {(proc / 'cmdline').read_bytes()[:120]!r}")
            os.kill(int(proc.name), 9)
        except (OSError, ValueError):
            continue  # ended meanwhile, or not ours to read
    return found


def main(argv: list[str]) -> int:
    run_all = "--all" in argv
    extra = [a for a in argv if a != "--all"]
    with tempfile.TemporaryDirectory(prefix="gpu-hosts-") as tmp:
        python = stamped_serving_env(Path(tmp) / "serve-cuda", "cuda")
        log = Path(tmp) / "standin.log"
        base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        base |= {"PATH": f"{STANDIN}{os.pathsep}{os.environ['PATH']}", "SERVE_PYTHON": str(python)}
        steps = [
            ("1 × H200, the worker without a GPU", ["tests/unit"],
             {"STANDIN_GPUS": "h200x1", "CUDA_VISIBLE_DEVICES": "", "STANDIN_LOG": str(log)}),
            ("8 × H100, 4 GPUs a worker", None, {"STANDIN_GPUS": "h100x8"}),
        ]  # fmt: skip
        failed = []
        for label, paths, env in steps:
            if paths is None:
                paths = ["tests/unit"] if run_all else touched(log)
                if not paths:
                    print(f"test-gpu-hosts: {label}: step 1 recorded no test asking for GPUs")
                    failed.append(label)
                    continue
            files = sorted({p.split("::", 1)[0] for p in paths})
            tests = "" if paths == ["tests/unit"] else f" ({len(paths)} tests)"
            print(f"test-gpu-hosts: {label}{tests}: {' '.join(files)}", flush=True)
            start, mark = time.monotonic(), f"{label}-{os.getpid()}-{time.time_ns()}"
            code = _pytest(paths, base | env | {"STANDIN_STEP": mark}, extra)
            print(f"test-gpu-hosts: {label}: exit {code} in {time.monotonic() - start:.0f} s",
                  flush=True)  # fmt: skip
            if left := left_behind(mark):
                print(f"test-gpu-hosts: {label}: left running after the tests: {left}")
            if code or left:
                failed.append(label)
    if failed:
        print(f"test-gpu-hosts: failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
