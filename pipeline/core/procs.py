"""Child processes that never outlive the command: each runs in its own process group with its
output in a log file, and the whole group is stopped when the block ends (normally, on an
error or on Ctrl-C): SIGTERM, then SIGKILL after a grace period.

Why not subprocess.run(capture_output=True): vLLM forks engine processes that survive their
parent (e.g. when it is OOM-killed) and keep its pipes open, so reading the pipes to EOF hangs.
"""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

GRACE_SECONDS = 10.0


@contextlib.contextmanager
def group(
    cmd: list[str],
    log_path: Path,
    env: dict | None = None,
    cwd: Path | None = None,
    stdin: int | None = None,
) -> Iterator[subprocess.Popen]:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            stop(proc)


def run(cmd: list[str], log_path: Path, env: dict | None = None, cwd: Path | None = None) -> int:
    """Runs to completion; returns the exit code of the command's own process."""
    with group(cmd, log_path, env, cwd) as proc:
        return proc.wait()


def stop(proc: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """Stops the process and everything it started (its process group)."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so a zombie does not count as alive
        if not group_alive(proc.pid):
            break
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdin:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def tail(log_path: Path, lines: int = 15) -> str:
    """The log's last non-blank lines, for error messages."""
    if not Path(log_path).is_file():
        return ""
    text = Path(log_path).read_text(errors="replace").replace("\r", "\n")
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def die_with_parent() -> None:
    """A process started with PIPELINE_PARENT_PID (a nightly cell) is killed when that parent
    dies: a Ray worker on a lost node takes its cell with it, so a retry elsewhere never races
    a survivor writing the same run folder. Linux's PR_SET_PDEATHSIG; elsewhere nothing."""
    parent = os.environ.get("PIPELINE_PARENT_PID")
    if not parent or not parent.isdigit():
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # it died before the line above: follow it now
        os._exit(137)
