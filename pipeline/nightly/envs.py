"""The project's environments on a Ray node. A cell runs with this checkout's own envs on the
node that runs it: the checkout at the driver's path (a shared filesystem, or `make setup` run
on the node at the same path), each env's stamp equal to the driver's — the Makefile writes the
sha256 of the pins an env was built from into its stamp. A node whose envs differ refuses its
cell with the fix, before any work; Ray's own copy of the code (`working_dir`) is never used:
it carries no envs.
"""

from pathlib import Path

from pipeline.core.paths import REPO

STAMPS = (".venv/.installed", ".venv-serve/.installed-*")


def fingerprint(repo: Path = REPO) -> dict[str, str]:
    """{stamp path relative to the checkout: its text} of every env built here."""
    found = {}
    for pattern in STAMPS:
        for stamp in sorted(repo.glob(pattern)):
            found[str(stamp.relative_to(repo))] = stamp.read_text()
    return found


def refusal(expected: dict[str, str], node: str, repo: Path = REPO) -> str | None:
    """Why this node cannot run a cell with the driver's envs (None: it can)."""
    if not (repo / ".venv" / "bin" / "python").exists():
        return (
            f"node {node}: no main env at {repo}/.venv: share the checkout with the driver, or "
            f"run `make setup` in a checkout at {repo} on that node"
        )
    here = fingerprint(repo)
    differ = sorted(k for k in expected.keys() | here.keys() if expected.get(k) != here.get(k))
    if differ:
        return (
            f"node {node}: its envs at {repo} were not built from the driver's pins "
            f"({', '.join(differ)}): run `make setup` there with the driver's commit"
        )
    return None


def python(repo: Path = REPO) -> str:
    """The main env's interpreter: what a cell's `python -m pipeline` runs on."""
    return str(repo / ".venv" / "bin" / "python")
