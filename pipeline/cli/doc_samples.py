"""`make docs-samples`: the output blocks of README.md and docs/jobs.md, printed again by the
commands they show, on this host. A block follows a marker naming its command's arguments:

    <!-- sample: run --recipe fp8 --stages eval -->
    ```text
    (what `python -m pipeline run --recipe fp8 --stages eval` printed on stdout)
    ```
    <sub>Printed on 2026-12-05 by …</sub>

Each command runs here with this environment's RUNS_DIR (cached stages print as cached); the run
root reads `runs/` wherever it is. The dated line under each block is rewritten with it.
tests/e2e/test_doc_samples.py runs the same commands in the test session and checks each block
line by line, by each line's head (`shape`): a block stale in its wording or its lines fails.
"""

import os
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

from pipeline.core import environment
from pipeline.core.paths import REPO
from pipeline.core.runs import Runs

PAGES = ("README.md", "docs/jobs.md")
SAMPLE = re.compile(
    r"<!-- sample: (?P<argv>[^>]+?) -->\n```text\n(?P<body>.*?)```\n(?P<note><sub>[^\n]*</sub>\n)?",
    re.S,
)
NUMBER = re.compile(r"\d+(?:[.,:]\d+)*(?:e[+-]?\d+)?")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?")
HEAD_END = re.compile(r": |[(;]")
FINGERPRINT = re.compile(r"\b[0-9a-f]{12,64}\b")  # a result folder's: differs by host


def blocks(text: str) -> list[tuple[str, str]]:
    """(the command's arguments, the block's text) of each marked block."""
    return [(m["argv"], m["body"]) for m in SAMPLE.finditer(text)]


def cleaned(stdout: str, runs_root: Path) -> str:
    """What a block shows of a command's stdout: the run root as `runs/`, a result folder's
    fingerprint as `<fingerprint>` (it differs by host, and reads like a commit hash)."""
    text = stdout.replace(f"{runs_root.resolve()}/", "runs/").replace(f"{runs_root}/", "runs/")
    return re.sub(r"/[0-9a-f]{16}/", "/<fingerprint>/", text)


def shape(text: str) -> list[str]:
    """What must not go stale: the lines, in order, each by its head (up to its first `: `, `(`
    or `;`: what follows is figures and verdicts, which differ from host to host), with every
    figure, date and column width left out."""
    lines = []
    for line in text.strip().splitlines():
        line = NUMBER.sub("#", FINGERPRINT.sub("<fp>", TIMESTAMP.sub("<time>", line)))
        head = HEAD_END.split(line, maxsplit=1)[0]
        lines.append(" ".join(head.split()))
    return lines


def printed(argv: str, runs_root: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *argv.split()],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "RUNS_DIR": str(runs_root)},
    )
    if done.returncode not in (0, 3):  # 3: a gate's verdict is output like any other
        raise SystemExit(f"`pipeline {argv}` exited {done.returncode}: {done.stderr[-2000:]}")
    return cleaned(done.stdout, runs_root)


def note() -> str:
    host = environment.host()
    gpus = ", ".join(host["gpus"]) or "no GPU"
    return (
        f"<sub>Printed on {date.today().isoformat()} by `make docs-samples` on a "
        f"{host['cpu_count']}-core {host['cpu_model'] or host['cpu']}, {gpus}. tiny-llama is "
        "trained on each host, so its figures differ from host to host.</sub>\n"
    )


def regenerate(text: str, runs_root: Path) -> str:
    def again(m: re.Match) -> str:
        print(f"  pipeline {m['argv']}", flush=True)
        body = printed(m["argv"], runs_root)
        return f"<!-- sample: {m['argv']} -->\n```text\n{body.rstrip()}\n```\n{note()}"

    return SAMPLE.sub(again, text)


def main() -> None:
    runs_root = Runs.from_env().local
    for page in PAGES:
        path = REPO / page
        print(f"{page}:", flush=True)
        path.write_text(regenerate(path.read_text(), runs_root))


if __name__ == "__main__":
    main()
