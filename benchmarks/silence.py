"""The longest silence of each common command, as a user's terminal sees it (issue 55: no step
silent for more than ~10 s). Each command runs on a pseudo-terminal, so progress bars draw as
they do for a user; every line or bar redraw (a newline or a carriage return) counts as output.

    .venv/bin/python benchmarks/silence.py [--lines] [COMMAND ...]

A command is a `make` line's target and variables, e.g. "quantize RECIPE=gptq"; by default the
issue's four, on a fresh run root (the envs and tiny-llama already built): quantize, eval, serve
(fp8), then compare of fp8 and w4a16-rtn. Prints each command's wall time, its longest silence
with the output line before it, and its first output's delay; `--lines` prints every line drawn
with its time, to find what a silence was.
"""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time

from pipeline.core.paths import REPO

DEFAULT = (
    "quantize RECIPE=fp8",
    "eval RECIPE=fp8",
    "serve RECIPE=fp8",
    "compare RECIPES=fp8,w4a16-rtn",
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def silences(command: str, env: dict, show: bool = False) -> dict:
    """Run `make <command>` on a pty; the output's moments and the longest gap between them."""
    parent, child = pty.openpty()
    # a terminal's size: on a 0-column pty tqdm's dynamic bars draw nothing but their label
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    start = time.monotonic()
    process = subprocess.Popen(
        ["make", "--no-print-directory", *command.split()],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    moments: list[tuple[float, str]] = []  # (seconds since start, the line then drawn)
    pending = ""
    while True:
        ready, _, _ = select.select([parent], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(parent, 65536).decode(errors="replace")
            except OSError:  # the pty closed: every writer exited
                break
            if not chunk:
                break
            pending += chunk
            *done, pending = re.split(r"[\r\n]", pending)
            now = time.monotonic() - start
            drawn = [(now, ANSI.sub("", line).strip()) for line in done if line.strip()]
            if show:
                for t, line in drawn:
                    print(f"  {t:7.1f} s  {line[:110]}", flush=True)
            moments += drawn
        elif process.poll() is not None:
            break
    process.wait()
    os.close(parent)
    wall = time.monotonic() - start
    times = [0.0] + [t for t, _ in moments] + [wall]
    gaps = [(times[i + 1] - times[i], i) for i in range(len(times) - 1)]
    longest, at = max(gaps)
    before = moments[at - 1][1] if at > 0 else "(the command's start)"
    return {
        "wall": wall,
        "exit": process.returncode,
        "first": moments[0][0] if moments else wall,
        "longest": longest,
        "after": before[:90],
    }


def main() -> None:
    show = "--lines" in sys.argv
    commands = [a for a in sys.argv[1:] if a != "--lines"] or DEFAULT
    with tempfile.TemporaryDirectory() as runs:
        env = {**os.environ, "RUNS_DIR": runs, "TERM": os.environ.get("TERM", "xterm")}
        for command in commands:
            s = silences(command, env, show)
            print(
                f"make {command}: exit {s['exit']}, {s['wall']:.1f} s; first output at "
                f"{s['first']:.1f} s; longest silence {s['longest']:.1f} s, after: {s['after']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
