"""The project's environments on a Ray node. A cell runs with this checkout's own envs on the
node that runs it: the checkout at the driver's path (a shared filesystem, or `make setup` run
on the node at the same path), each env's stamp equal to the driver's — the Makefile writes the
sha256 of the pins an env was built from into its stamp. A node whose envs differ refuses its
cell with the fix, before any work; Ray's own copy of the code (`working_dir`) is never used:
it carries no envs.
"""

from pathlib import Path

from pipeline.core import secrets
from pipeline.core.paths import REPO

STAMPS = (".venv/.installed", ".venv-serve/.installed-*")


def fingerprint(repo: Path = REPO) -> dict[str, str]:
    """{stamp path relative to the checkout: its text} of every env built here."""
    found = {}
    for pattern in STAMPS:
        for stamp in sorted(repo.glob(pattern)):
            found[str(stamp.relative_to(repo))] = stamp.read_text()
    return found


def refusal(
    expected: dict[str, str], node: str, remote: str | None, repo: Path = REPO
) -> str | None:
    """Why this node cannot run a cell with the driver's envs and reach `remote`, the object
    store its run folders are in (None: it can)."""
    if not (repo / ".venv" / "bin" / "python").exists():
        return (
            f"node {node}: no main env at {repo}/.venv: share the checkout with the driver, or "
            f"run `make setup` in a checkout at {repo} on that node"
        )
    if why := credentials_refusal(node, remote):
        return why
    here = fingerprint(repo)
    differ = [
        f"{k}: {_difference(k, expected, here)}"
        for k in sorted(expected.keys() | here.keys())
        if expected.get(k) != here.get(k)
    ]
    if differ:
        return (
            f"node {node}: its envs at {repo} were not built from the driver's pins "
            f"({'; '.join(differ)}): run `make setup` there with the driver's commit"
        )
    return None


def _difference(stamp: str, driver: dict[str, str], here: dict[str, str]) -> str:
    if stamp not in here:
        return "missing here"
    return "not on the driver" if stamp not in driver else "built from other pins"


def credentials_refusal(node: str, url: str | None) -> str | None:
    """Why this node cannot reach the object store at `url`, RUNS_DIR's (None: it can, or
    there is none). Credentials never travel with a Ray task (executors.SHARED): the node has
    its own."""
    if not url or not url.startswith("s3://"):
        return None
    import botocore.session

    if botocore.session.get_session().get_credentials() is not None:
        return None
    return (
        f"node {node}: no AWS credentials for RUNS_DIR={secrets.url(url)}: start its `ray "
        "start` with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in its environment, or give it "
        "~/.aws/credentials (credentials never travel with the job: Ray logs what does)"
    )


def python(repo: Path = REPO) -> str:
    """The main env's interpreter: what a cell's `python -m pipeline` runs on."""
    return str(repo / ".venv" / "bin" / "python")
