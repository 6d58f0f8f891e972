"""Every command line shown in README.md and docs/ (fenced ```bash blocks) runs as shown, in the
form that does no real work, so a promise the docs make that breaks fails CI:

- `make TARGET VAR=…`: `make -n` expands it exactly as a user's make would, and the pipeline
  command it runs is then run itself — with `--dry-run` where the command has one (the plan,
  offline: exit 0, or 4 where this host cannot do it), as it is where it only reads (recipes,
  plan, …), or through the pipeline's own parser where running would do the work and the command
  has no dry run (nightly, report, search, clean-cache; a `--matrix` named is loaded too);
- `python -m pipeline …`: the same, without make;
- `.venv/bin/ray …`: parsed by Ray's own command line (click), not run; a bare `ray` must be on
  PATH, which a fresh clone's is not;
- `export …`, and scripts: `bash -n` (their syntax); what cannot run here is in NOT_RUN, each
  with its reason, and still expanded or parsed.

About 45 lines; ~1 min on 2 busy cores (the pipeline's dry runs take ~3 s each, two at a time).
"""

import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.conftest import REPO

FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
PYTHON = str(REPO / ".venv" / "bin" / "python")
CRON_FIELD = re.compile(r"^[\d*/,-]+$")
REDIRECT = re.compile(r"\s\d*>>?(&\d+|\s*[^\s;&|]+)")
SEPARATORS = {"&&", "||", ";", "|"}

# The pipeline's commands by how this test runs them (a command shown in the docs must be in one)
DRY_RUN = {"quantize", "eval", "serve", "run", "publish", "compare"}  # + --dry-run: the plan
READ_ONLY = {"recipes", "models", "schema", "plan", "advise"}  # run as shown: they only read
PARSE_ONLY = {  # parsed by the pipeline's parser, not run
    "nightly": "runs the whole matrix (its --matrix is loaded and validated)",
    "report": "reads the nightly store (a team's PostgreSQL in the docs)",
    "search": "measures every layer group's sensitivity (minutes)",
    "clean-cache": "deletes results",
}
# Shown but not run here; each still expanded (make -n) or parsed (bash -n)
NOT_RUN = {
    "make test": "the suite itself, this test among it",
    "make setup": "builds both environments from the registries (minutes)",
    "make gpu-bundle": "downloads the wheels from PyPI (tests/e2e/test_gpu_bundle.py makes one)",
    "cd /srv/quant-pipeline": "the crontab's own step, on the team's server",
    "git pull -q": "the crontab's own step, on the team's server",
}
# Values a command shows that cannot work here, replaced (the variable, what its value starts with)
REPLACED = {
    ("RUNS_DIR", "s3://"): "no bucket reachable here: a temporary folder (tests/e2e run RUNS_DIR "
    "in moto's S3)",
}
# Outcomes that are the documented precondition, not a broken promise: (command, exit, words)
ALLOWED = {
    ("publish", 2, "no finished artifact"): "publish needs `make run` first, as the docs order it",
    ("run", 2, "HF_HUB_OFFLINE is set"): "a checkpoint on the hub: no hub here (HF_HUB_OFFLINE=1)",
    ("run", 2, "'path/to/checkpoint' is neither a folder"): "the reader's folder, a placeholder",
    ("quantize", 2, "'path/to/checkpoint' is neither a folder"): "the same placeholder",
}


@dataclass
class Shown:
    where: str  # file:line
    line: str  # as shown (continuations joined)


@dataclass
class Check:
    shown: Shown
    argv: list[str]
    env: dict = field(default_factory=dict)
    ok: tuple[int, ...] = (0,)
    what: str = ""  # what it proves


def shown_commands() -> list[Shown]:
    """Every command line of every fenced bash block: continuations joined, comments dropped."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = path.read_text()
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            lines = block.group(1).split("\n")
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                if code := _without_comment(line):
                    found.append(Shown(f"{path.relative_to(REPO)}:{first + start}", code))
    return found


def _without_comment(line: str) -> str:
    """The line up to a `#` that starts a comment (outside quotes, after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip()
    return line.strip()


def simple_commands(line: str) -> list[list[str]]:
    """A line's simple commands (split at && || ; |), redirections dropped; a crontab line's
    schedule too."""
    words = shlex.shlex(REDIRECT.sub("", line), posix=True, punctuation_chars=";&|")
    words.whitespace_split = True
    tokens = list(words)
    if len(tokens) > 5 and all(CRON_FIELD.match(t) for t in tokens[:5]):
        tokens = tokens[5:]
    commands, current = [], []
    for t in tokens:
        if t in SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(t)
    return [c for c in [*commands, current] if c]


def _split_env(tokens: list[str]) -> tuple[dict, list[str]]:
    env = {}
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):
        name, _, value = tokens[0].partition("=")
        env[name] = value
        tokens = tokens[1:]
    return env, tokens


def _replaced(env: dict, tmp) -> dict:
    """The line's own variables, RUNS_DIR an empty folder unless the line sets one: what a dry
    run says does not depend on what this checkout has run."""
    out = {"RUNS_DIR": str(tmp / "runs"), **env}
    for (name, prefix), _why in REPLACED.items():
        if out.get(name, "").startswith(prefix):
            out[name] = str(tmp / name.lower())
    return out


def checks_for(shown: Shown, tmp) -> list[Check]:
    """What this test runs for one shown line (make's expansion happens here)."""
    found = []
    for tokens in simple_commands(shown.line):
        env, argv = _split_env(tokens)
        env = _replaced(env, tmp)
        key = " ".join(argv[:2]) if argv[0] in ("make", "bash") else " ".join(argv)
        if argv[0] == "make":
            found += _make(shown, argv, env, key in NOT_RUN)
        elif argv[:3] == ["python", "-m", "pipeline"]:
            found += _pipeline(shown, argv[3:], env)
        elif argv[0] == "export":
            found.append(Check(shown, ["bash", "-n", "-c", shlex.join(tokens)], what="syntax"))
        elif argv[0] == "bash" and key in NOT_RUN:
            found.append(Check(shown, ["bash", "-n", argv[1]], what="syntax (not run here)"))
        elif argv[0].endswith("ray"):
            found.append(_ray(shown, argv))
        elif key not in NOT_RUN:
            raise AssertionError(f"{shown.where}: `{shown.line}`: no rule to check {argv[0]!r}")
    return found


def clean_env() -> dict:
    """This environment less what a parent make passes down (under `make test ARGS=…`, its
    ARGS would reach every make line run here)."""
    return {k: v for k, v in os.environ.items() if k not in MAKE_LEAKS}


MAKE_LEAKS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "ARGS", "MODEL", "RECIPE")


def _make(shown: Shown, argv: list[str], env: dict, not_run: bool) -> list[Check]:
    done = subprocess.run(
        ["make", "-n", "-s", "--no-print-directory", *argv[1:]],
        cwd=REPO, env={**clean_env(), **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"{shown.where}: `{shown.line}`: make -n: {done.stderr.strip()}"
    lines = done.stdout.replace("\\\n", " ").splitlines()
    runs = [shlex.split(x) for x in lines if " -m pipeline " in f"{x} "]
    if not runs:
        assert not_run, f"{shown.where}: `{shown.line}` runs no pipeline command (make -n: {lines})"
        return []
    return [c for run in runs for c in _pipeline(shown, run[run.index("-m") + 2 :], env)]


def _pipeline(shown: Shown, args: list[str], env: dict) -> list[Check]:
    """One pipeline command line: parsed here by its parser, then run where that is cheap."""
    from pipeline.cli.main import _parser

    try:
        parsed = _parser().parse_args(args)
    except SystemExit:
        raise AssertionError(f"{shown.where}: `{shown.line}`: the parser refuses {args}") from None
    command = args[0]
    if command in DRY_RUN:
        args = args if "--dry-run" in args else [*args, "--dry-run"]
        return [Check(shown, [PYTHON, "-m", "pipeline", *args], env, (0, 4), "its plan")]
    if command in READ_ONLY:
        return [Check(shown, [PYTHON, "-m", "pipeline", *args], env, (0,), "run as shown")]
    assert command in PARSE_ONLY, (
        f"{shown.where}: `{command}`: add it to DRY_RUN, READ_ONLY or PARSE_ONLY"
    )
    if command == "nightly":
        from pipeline.nightly import matrix

        matrix.load(parsed.matrix)  # the matrix it would run: valid
    return []


def _ray(shown: Shown, argv: list[str]) -> Check:
    program = argv[0]
    if "/" not in program:
        assert shutil.which(program), (
            f"{shown.where}: `{shown.line}`: {program!r} is not on PATH (the venv's is "
            f".venv/bin/{program})"
        )
    else:
        assert (REPO / program).is_file(), f"{shown.where}: {program} does not exist"
    parse = (
        "import sys; from ray.scripts.scripts import cli; "
        "ctx = cli.make_context('ray', sys.argv[1:2]); "
        "name, cmd, rest = cli.resolve_command(ctx, sys.argv[1:]); "
        "cmd.make_context(name, rest, parent=ctx)"
    )
    return Check(shown, [PYTHON, "-c", parse, *argv[1:]], what="parsed by ray's CLI")


def _allowed(check: Check, done) -> bool:
    command = next((a for a in check.argv[3:] if not a.startswith("-")), "")
    return any(
        command == c and done.returncode == rc and text in done.stderr for (c, rc, text) in ALLOWED
    )


def _run(check: Check) -> str | None:
    done = subprocess.run(
        check.argv, cwd=REPO, env={**clean_env(), **check.env}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    if (done.returncode in check.ok or _allowed(check, done)) and "Traceback" not in done.stderr:
        return None
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return (
        f"{check.shown.where}: `{check.shown.line}` ({check.what}: {shlex.join(check.argv[1:])}) "
        f"exit {done.returncode}: {' / '.join(tail)}"
    )


def test_the_reader_joins_continuations_drops_comments_and_reads_a_crontab():
    assert simple_commands(
        "0 2 * * * cd /srv/x && make nightly >> runs/n.log 2>&1; make report"
    ) == [
        ["cd", "/srv/x"],
        ["make", "nightly"],
        ["make", "report"],
    ]
    assert simple_commands('RUNS_DIR=s3://b/p make nightly ARGS="--executor ray"') == [
        ["RUNS_DIR=s3://b/p", "make", "nightly", "ARGS=--executor ray"]
    ]
    assert _without_comment("make test   # the tests") == "make test"
    assert _without_comment("make x ARGS='a # b'") == "make x ARGS='a # b'"


def test_every_command_the_docs_show_runs_as_shown(tmp_path):
    shown = shown_commands()
    assert len(shown) >= 40, f"the reader found only {len(shown)} command lines"
    checks, seen, failures = [], set(), []
    for s in shown:
        try:
            found = checks_for(s, tmp_path)
        except AssertionError as e:  # every broken line at once, not the first alone
            failures.append(str(e).splitlines()[0])
            continue
        for c in found:
            key = (tuple(c.argv), tuple(sorted(c.env.items())))
            if key not in seen:  # the README and a guide often show the same line
                seen.add(key)
                checks.append(c)
    keys = {k for s in shown for t in simple_commands(s.line) for k in _keys(t)}
    stale = set(NOT_RUN) - keys
    assert not stale, f"NOT_RUN names commands no page shows any more: {stale}"
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures += [f for f in pool.map(_run, checks) if f]
    assert not failures, "\n".join(failures)


def _keys(tokens: list[str]) -> set[str]:
    _, argv = _split_env(tokens)
    return {" ".join(argv[:2]), " ".join(argv)}


@pytest.mark.parametrize("line", ["ray start --head --port=6379 --num-gpus=0"])
def test_a_bare_ray_is_refused_where_it_is_not_on_path(line, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AssertionError, match="not on PATH"):
        checks_for(Shown("x.md:1", line), tmp_path)


def test_the_recipe_the_recipes_page_shows_loads(tmp_path):
    from pipeline.config import recipe

    text = (REPO / "docs" / "recipes.md").read_text()
    (shown,) = re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)
    path = tmp_path / "my-gptq.yaml"
    path.write_text(shown)
    loaded = recipe.load(str(path))
    assert loaded.spec.calibration.num_samples == 1024 and loaded.scheme().name == "W4A16"
