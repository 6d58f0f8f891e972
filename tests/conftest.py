"""What every test shares: the repository, an offline environment, the `gpu` marker and `cli`,
which runs the pipeline as a user would. The heavy fixtures (tiny model, quantized and served
artifacts) live in tests/e2e/conftest.py; tests/unit needs none of them. How `make test` spreads
the tests over several workers: tests/parallel.py."""

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["tests.parallel"]

REPO = Path(__file__).resolve().parent.parent
SERVE_PYTHON = REPO / ".venv-serve" / "bin" / "python"
os.environ.setdefault("PIPELINE_CACHE", str(REPO / ".cache"))
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing in the tests may reach a hub
# torch documents that a CUDA query before a fork poisons CUDA in the child unless the query
# goes through NVML: the test zygote imports llm-compressor (which asks) and forks every CLI call
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
# the stand-in nvidia-smi (tests/gpu_hosts) starts with this interpreter, not a python3 shim
os.environ.setdefault("STANDIN_PYTHON", sys.executable)


@contextlib.contextmanager
def scratch(tmp_path_factory, name: str):
    """A folder for a module's fixture, removed when the fixture ends (a test's own tmp_path
    goes when it passes: pyproject's retention policy): the real-shape artifacts are GBs each."""
    path = tmp_path_factory.mktemp(name)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def has_gpu() -> bool:
    """Whether this process sees a GPU (a test worker sees its own: tests/parallel.py)."""
    from pipeline.core import devices

    return bool(devices.seen())


def pytest_collection_modifyitems(config, items):
    gpu = has_gpu()
    skip = pytest.mark.skip(reason="sees a GPU: asserts a CPU host" if gpu else "needs a CUDA GPU")
    for item in items:
        if ("cpu_host" if gpu else "gpu") in item.keywords:
            item.add_marker(skip)


def stamped_serving_env(root: Path, build: str) -> Path:
    """A serving env as `make setup` leaves it on a host of `build` ("cpu" | "cuda"): this
    checkout's .venv-serve (its python, vLLM and torch, linked) under that build's stamp, which
    is all serving_env reads to tell the builds apart. Returns its python, for SERVE_PYTHON
    (absent where .venv-serve is: serving_env.available() then says so)."""
    root.mkdir(parents=True, exist_ok=True)
    for entry in (REPO / ".venv-serve").glob("*"):  # pathlib's "*" matches dotfiles too
        if not entry.name.startswith(".installed-") and not (root / entry.name).is_symlink():
            (root / entry.name).symlink_to(entry)  # the stamps stay behind: a link would
            # write this one through to the checkout's own (a nightly's nodes compare it)
    (root / f".installed-{build}").write_text(f"{REPO / '.venv-serve'} as the {build} build\n")
    return root / "bin" / "python"


def as_cpu_host(monkeypatch, root: Path) -> dict:
    """This process, and the commands it starts, as on a CPU host after `make setup`: no GPU
    visible (CUDA_VISIBLE_DEVICES="" hides every GPU nvidia-smi lists) and the serving env (in
    `root`) stamped as vLLM's CPU build. For tests of what a CPU host's vLLM refuses or accepts:
    a test worker without a GPU on a GPU host (tests/parallel.py) holds the CUDA build, and would
    meet that build's own refusal ("sees no GPU", exit 4) first. Returns the variables set."""
    from pipeline.engines.vllm import serving_env

    python = stamped_serving_env(root, "cpu")
    env = {"SERVE_PYTHON": str(python)}
    if has_gpu():  # set only where it hides something: a CLI call then forks from the zygote
        env["CUDA_VISIBLE_DEVICES"] = ""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(serving_env, "SERVE_PYTHON", python)
    return env


@pytest.fixture
def cpu_host_env(tmp_path_factory, monkeypatch) -> dict:
    """as_cpu_host for the whole test."""
    return as_cpu_host(monkeypatch, tmp_path_factory.mktemp("serve-cpu"))


def start_postgres():
    """A PostgreSQL server of this worker's (tests/postgres.py); skips where it is not
    installed, fails there under REQUIRE_POSTGRES=1 (CI)."""
    from tests.postgres import Server, binaries

    if binaries() is None:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail("REQUIRE_POSTGRES=1 but PostgreSQL is not installed")
        pytest.skip("PostgreSQL is not installed (/usr/lib/postgresql/*/bin)")
    return Server()


@pytest.fixture(scope="session")
def postgres():
    """This worker's own PostgreSQL server; `.database()` gives a fresh database's URL."""
    server = start_postgres()
    yield server
    server.stop()


S3_SECRET = "planted-s3-secret-5fQ9zW"


@pytest.fixture(scope="session")
def s3():
    """moto's S3 server on 127.0.0.1 (the S3 API itself, not a mock of fsspec); `.env` points
    boto at it, `.bucket()` makes a fresh bucket and gives its s3:// URL."""
    import uuid

    from moto.server import ThreadedMotoServer

    from tests.postgres import _free_port

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # a distinctive secret (moto accepts any): tests search every output and log for it
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip

    class S3:
        def __init__(self):
            self.env = env
            self.made: list[str] = []

        def bucket(self) -> str:
            import boto3

            name = f"b-{uuid.uuid4().hex[:12]}"
            boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                         aws_access_key_id="test", aws_secret_access_key=S3_SECRET
                         ).create_bucket(Bucket=name)  # fmt: skip
            self.made.append(name)
            return f"s3://{name}"

    s3 = S3()
    yield s3
    server.stop()
    from pipeline.core.paths import mirror_root

    for name in s3.made:  # the local working copies (Runs.local) of what the buckets held
        shutil.rmtree(mirror_root(f"s3://{name}"), ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """An empty results database: SQLite in a file, and PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return request.getfixturevalue("postgres").database()


def cli(*args: str, runs: Path, env: dict | None = None, timeout: int = 900, fresh: bool = False):
    """Run `python -m pipeline …` as a user would, with RUNS_DIR pointed at `runs`: forked from
    this worker's zygote (tests/zygote.py: the libraries imported once), or a fresh process
    when the environment differs in a variable the libraries read at import, or when `fresh`
    (a test that measures the process's memory). A variable given as None is unset (e.g. the
    test worker's own CUDA_VISIBLE_DEVICES, where a test means every stand-in GPU)."""
    merged = {**os.environ, "RUNS_DIR": str(runs), **(env or {})}
    full_env = {k: v for k, v in merged.items() if v is not None}
    if not fresh and _zygote().fits(full_env):
        return _zygote().run(list(args), full_env, REPO, timeout)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@functools.cache
def _zygote():
    from tests.zygote import Zygote

    return Zygote(REPO)
