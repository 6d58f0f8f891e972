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
line by line, by each line's head (`shape`) and its verdicts, and each measured figure within a
stated tolerance (`figures_off`): a block stale in its wording, its lines or its figures fails.
A command too costly to run there again (a serve, a publish) is checked by the test that already
runs it (CHECKED_IN).

An `<!-- excerpt: … -->` marker shows some of a command's lines (a `…` line stands for those
left out): the test checks each shown line is one the command prints, in order; `make
docs-samples` runs its command too (a later block may need what it made) and names it if it is
stale, for an edit by hand.
"""

import os
import re
import socket
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
EXCERPT = re.compile(r"<!-- excerpt: (?P<argv>[^>]+?) -->\n```text\n(?P<body>.*?)```\n", re.S)
ANY_BLOCK = re.compile(  # either, in page order
    r"<!-- (?P<kind>sample|excerpt): (?P<argv>[^>]+?) -->\n```text\n(?P<body>.*?)```\n"
    r"(?P<note><sub>[^\n]*</sub>\n)?",
    re.S,
)
# Commands whose blocks the test that already runs them checks (tests/e2e/test_doc_samples.py
# checks that each of these tests names its command)
CHECKED_IN = {
    "serve --recipe fp8": "tests/e2e/serve/test_serve_stage.py",
    "publish --recipe fp8 --repo acme/tiny-llama-fp8 --dry-run": (
        "tests/e2e/publish/test_publish.py"
    ),
    "publish --recipe fp8 --repo file:///tmp/published/tiny-llama-fp8": (
        "tests/e2e/publish/test_publish.py"  # its own folder shown as the page's
    ),
    # the shipped matrix with its cells cached, gptq's not served (as on an AVX2 host)
    "nightly --executor ray": "tests/e2e/nightly/test_nightly.py",
    "report": "tests/e2e/nightly/test_nightly.py",
    # two cells quantized and evaluated as shipped, beside the calibration test's own
    "compare --recipes gptq --calib python-docs,python-docs-chat": (
        "tests/e2e/test_calibration_compare.py"
    ),
}
# `c=16+`: 16 or more; a CI's bound keeps its sign with it (`[-0.01,+0.00]`), a word's
# hyphen (`2-core`) does not
NUMBER = re.compile(r"(?:(?<![\w.])[+-])?\d+(?:[.,:]\d+)*(?:e[+-]?\d+)?\+?")
DURATION = re.compile(r"\d+(?:\.\d+)? (?:s|min|h)\b")  # its unit follows its size: a figure too
# a column's figure or its `-` where this host measured none (a scheme it cannot serve)
NO_FIGURE = re.compile(r"(?<!\S)(?:#×|-)(?!\S)")
RUN_ID = re.compile(r"\b\d{8}T\d{6}-[0-9a-f]{6}\b")  # a nightly run's (nightly/store/holding.py)
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?")
HEAD_END = re.compile(r": |[(;]")
# What a line decides, compared word for word wherever it stands (after its head too): a
# verdict, an ordering's, a gate's, an exit code with its number
VERDICT = re.compile(
    r"\b(?:indistinguishable|better|worse|does not hold|holds|FAIL|pass|inconclusive|ok|"
    r"regressions?|failed|exit \d+)\b"
)
FINGERPRINT = re.compile(r"\b[0-9a-f]{12,64}\b")  # a result folder's: differs by host
# A measured figure shown with its standard error (`0.9999±0.0001`, `1.07e-04 ± 5.0e-06`): the
# drift a reader judges by, compared with the one printed now at the same place within
# FIGURE_TOLERANCE (relative). tiny-llama is trained on each host, so these move from host to
# host (fp8's mean KL: 8.7e-05 and 1.07e-04 after two trainings here); a block left from another
# model, data set or formula moves them by far more. Times, rates and counts are not compared.
MEASURED = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:e[+-]?\d+)?) ?± ?\d")
FIGURE_TOLERANCE = 0.5


def blocks(text: str) -> list[tuple[str, str]]:
    """(the command's arguments, the block's text) of each marked block."""
    return [(m["argv"], m["body"]) for m in SAMPLE.finditer(text)]


def excerpts(text: str) -> list[tuple[str, str]]:
    return [(m["argv"], m["body"]) for m in EXCERPT.finditer(text)]


def block(argv: str) -> tuple[str, str, bool]:
    """(page, the block's text, whether it is an excerpt) of the block marked with `argv`."""
    for page in PAGES:
        text = (REPO / page).read_text()
        for found, body in blocks(text):
            if found == argv:
                return page, body, False
        for found, body in excerpts(text):
            if found == argv:
                return page, body, True
    raise KeyError(f"no block marked `{argv}` in {', '.join(PAGES)}")


def mismatch(argv: str, stdout: str, runs_root: Path) -> str | None:
    """Why the block marked `argv` is not what `stdout` (that command's) shows; None if it is."""
    page, body, excerpt = block(argv)
    now = cleaned(stdout, runs_root)
    if shows(body, now, excerpt):
        off = [] if excerpt else figures_off(body, now)
        if not off:
            return None
        said = f"shows figures more than {FIGURE_TOLERANCE:.0%} from what the command printed"
        return f"{page}: the block of `{argv}` {said}: " + "; ".join(off)
    shown, printed_now = _rows_once(shape(body)), _rows_once(shape(now))
    return (
        f"{page}: the block of `{argv}` shows\n  "
        + "\n  ".join(shown)
        + ("\nbut the command printed\n  " + "\n  ".join(printed_now))
    )


def shows(body: str, printed_now: str, excerpt: bool = False) -> bool:
    """Whether a block shows what a command printed: the same lines by shape, a run of repeated
    rows counted once; an excerpt's lines each found in order, `…` lines aside."""
    shown, printed_rows = _rows_once(shape(body)), _rows_once(shape(printed_now))
    if not excerpt:
        return shown == printed_rows
    rest = iter(printed_rows)  # `in` consumes the iterator up to the line found: in order
    return all(line in rest for line in shown if not line.startswith("…"))


def figures_off(body: str, printed_now: str) -> list[str]:
    """Each measured figure (MEASURED) of the block beyond FIGURE_TOLERANCE of the one at the
    same place in what was printed now (the same line, the same position in it): `shown → now`
    with its line's head. Blocks whose repeated rows differ in count have no such places."""
    shown, now = body.strip().splitlines(), printed_now.strip().splitlines()
    if len(shown) != len(now):
        return []
    off = []
    for line, again in zip(shown, now, strict=True):
        for a, b in zip(MEASURED.findall(line), MEASURED.findall(again), strict=False):
            x, y = float(a), float(b)
            if abs(x - y) > FIGURE_TOLERANCE * max(abs(x), abs(y)):
                off.append(f"{_split_head(line)[0].strip()}: {a} → {b}")
    return off


def _rows_once(lines: list[str]) -> list[str]:
    """A run of repeated rows (a row, or a group of up to 3, each per level or cell: their count
    follows the settings) as one."""
    out: list[str] = []
    for line in lines:
        out.append(line)
        for k in (1, 2, 3):
            if len(out) >= 2 * k and out[-k:] == out[-2 * k : -k]:
                del out[-k:]
                break
    return out


def cleaned(stdout: str, runs_root: Path) -> str:
    """What a block shows of a command's stdout: the run root as `runs`, the home folder as
    `~`, this host's name as `<host>`, a Ray node's id as `<node id>`, a hash of token ids (a
    bare sha256 prefix, as a table's column) as `<sha256>` and a result folder's fingerprint as
    `<fingerprint>` (each differs by host; a hash reads like a commit's)."""
    text = stdout
    for root in {str(runs_root.resolve()), str(runs_root)}:
        text = re.sub(re.escape(root) + r"(?![\w.-])", "runs", text)
    text = re.sub(re.escape(str(Path.home())) + r"(?=/)", "~", text)
    text = re.sub(rf"\b{re.escape(socket.gethostname())}/", "<host>/", text)
    text = re.sub(r"<host>/[0-9a-f]{12}\b", "<host>/<node id>", text)  # a Ray node's, cut
    text = re.sub(r"\bsha256 [0-9a-f]{12,64}\b", "sha256 <sha256>", text)  # of token ids
    text = re.sub(r"/[0-9a-f]{16}/", "/<fingerprint>/", text)
    return re.sub(r"(?<![\w/<.-])[0-9a-f]{12,64}(?![\w/>.-])", "<sha256>", text)  # a bare one


def shape(text: str) -> list[str]:
    """What must not go stale: the lines, in order, each by its head (up to its first `: `, `(`
    or `;`: the wording that follows may be reworded) and the verdicts anywhere in it (VERDICT:
    word for word, an exit code with its number), with every other figure, date and column
    width left out (tiny-llama is trained on each host: its figures differ from host to host)."""
    lines = []
    for line in text.strip().splitlines():
        line = RUN_ID.sub("<run id>", TIMESTAMP.sub("<time>", line))
        head, _, rest = _split_head(line)
        said = VERDICT.findall(FINGERPRINT.sub("<fp>", rest))
        head = NUMBER.sub("#", DURATION.sub("<duration>", FINGERPRINT.sub("<fp>", head)))
        head = " ".join(NO_FIGURE.sub("#", head).split())
        lines.append(" | ".join([head, *said]))
    return lines


def _split_head(line: str) -> tuple[str, str, str]:
    """(head, separator, rest) at the first `: `, `(` or `;` outside a figure."""
    masked = NUMBER.sub(lambda m: "#" * len(m[0]), line)  # a figure's `:` (12:30) is no end
    found = HEAD_END.search(masked)
    if not found:
        return line, "", ""
    return line[: found.start()], found[0], line[found.end() :]


def printed(argv: str, runs_root: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *argv.split()],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "RUNS_DIR": str(runs_root)},
    )
    if not printed_as_output(argv, done.returncode):
        raise SystemExit(f"`pipeline {argv}` exited {done.returncode}: {done.stderr[-2000:]}")
    return cleaned(done.stdout, runs_root)


def printed_as_output(argv: str, code: int) -> bool:
    """Whether a command's exit code leaves its output a sample: 0, a gate's verdict (3), or
    a dry run's refusal on this host (4: the plan is printed all the same, a small disk's)."""
    return code in (0, 3) or (code == 4 and "--dry-run" in argv.split())


def note() -> str:
    host = environment.host()
    gpus = ", ".join(host["gpus"]) or "no GPU"
    return (
        f"<sub>Printed on {date.today().isoformat()} by `make docs-samples` on a "
        f"{host['cpu_count']}-core {host['cpu_model'] or host['cpu']}, {gpus}. tiny-llama is "
        "trained on each host, so its figures differ from host to host.</sub>\n"
    )


def regenerate(text: str, runs_root: Path, only: str | None = None) -> tuple[str, list[str]]:
    """The page with each sample printed again, every marked command run in page order (a later
    block sees what the earlier ones left, as a reader following the page would); and the
    excerpts no longer shown by their command, which are edited by hand. `only`: the blocks
    whose command starts so, the others left as they are (a command that makes what it needs,
    as compare does)."""
    stale = []

    def again(m: re.Match) -> str:
        if only and not m["argv"].startswith(only):
            return m[0]
        print(f"  pipeline {m['argv']}", flush=True)
        body = printed(m["argv"], runs_root)
        if m["kind"] == "excerpt":
            if not shows(m["body"], body, excerpt=True):
                stale.append(m["argv"])
            return m[0]
        return f"<!-- sample: {m['argv']} -->\n```text\n{body.rstrip()}\n```\n{note()}"

    return ANY_BLOCK.sub(again, text), stale


def main(argv: list[str] | None = None) -> None:
    """`make docs-samples [ARGS="--only compare"]`."""
    only = None
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--only"] and len(args) == 2:
        only = args[1]
    elif args:
        raise SystemExit('usage: python -m pipeline.cli.doc_samples [--only "COMMAND ARGS"]')
    runs_root = Runs.from_env().local
    stale = []
    for page in PAGES:
        path = REPO / page
        print(f"{page}:", flush=True)
        text, stale_here = regenerate(path.read_text(), runs_root, only)
        path.write_text(text)
        stale += [f"{page}: `{argv}`" for argv in stale_here]
    if stale:
        raise SystemExit(
            "excerpts to edit by hand (a line shown is not printed):\n  " + "\n  ".join(stale)
        )


if __name__ == "__main__":
    main()
