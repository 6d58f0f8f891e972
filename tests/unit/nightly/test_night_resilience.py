"""The nightly driver with its store going wrong (issue 45): the line it prints at start and the
command line's messages never show the database's password; a driver whose lease another
driver took, or which loses the database, ends its running cell and stops with one line. The
driver runs in-process with a stand-in executor (a cell is a `sleep` in its own session, as a
real cell's `pipeline run` is), and so does the command line, except where a process of its
own is the point (a read-only file)."""

import os
import shutil
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from pipeline.core.runs import Runs
from tests.conftest import REPO
from tests.unit.nightly.test_store import FACTS, _result
from tests.unit.nightly.test_store_resilience import (
    PASSWORD,
    _limits,
    _one_line_without_password,
    _with_password,
)

CELLS = [SimpleNamespace(model="m", name="c1"), SimpleNamespace(model="m", name="c2")]


class Runner:
    """The executor's contract (executors.Local): claim each cell, run it, hand back its
    result. `slow`: a cell runs `sleep 60` in its own session, registered as a running cell
    (cell.stop_running ends it) — its result then says how it ended."""

    name = "local"

    def __init__(self, slow: bool = False):
        self.slow, self.procs = slow, []

    def run(self, cells, log_dir, done, claim) -> None:
        from pipeline.nightly import cell as cell_module

        for c in cells:
            if not claim(c):
                continue
            if not self.slow:
                done(_result(c.model, c.name))
                continue
            proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
            self.procs.append(proc)
            cell_module._RUNNING.add(proc.pid)
            code = proc.wait()
            cell_module._RUNNING.discard(proc.pid)
            done({**_result(c.model, c.name, 0), "status": "failed", "error": f"exit {code}"})


@pytest.fixture
def driver(monkeypatch, tmp_path):
    """night._night as `make nightly` calls it, with a quick heartbeat and this test's facts."""
    from pipeline.nightly import matrix, night

    monkeypatch.delenv("NIGHTLY_DB", raising=False)
    monkeypatch.setattr(night, "facts", lambda: FACTS)
    monkeypatch.setattr(night, "HEARTBEAT_S", 1.0)
    m = SimpleNamespace(thresholds=matrix.Thresholds())

    def drive(store, runner):
        runner.runs = Runs(tmp_path / "runs")  # as executors.connect hands it
        return night._night(m, "matrix", CELLS, store, runner, False)

    return drive


def test_the_night_shows_its_store_without_the_password(own_pg, driver, capsys):
    from pipeline.nightly import night

    url = _with_password(own_pg, own_pg.database())
    store = night.open_store(url, None)
    assert driver(store, Runner()) == ("ok", None)
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err
    first = out.splitlines()[0]
    assert first.endswith(f":***@127.0.0.1:{own_pg.port}/{url.rsplit('/', 1)[1]}"), first
    assert ": 2 cells, executor local, store postgresql+psycopg://r_" in first
    (run,) = store.run_ids()
    assert run["ended"] and len(store.cells_of(run["id"])) == 2


def test_a_driver_whose_lease_was_taken_stops_its_cell(store_url, driver, monkeypatch):
    """A's lease lapses while its cell runs (its heartbeat is slower than its lease here); B
    takes the run and the cell. A's next heartbeat is refused: its cell is ended at once, its
    failure is not recorded (B runs the cell), and A stops with one line."""
    from pipeline.nightly import night
    from pipeline.nightly.store import LeaseLost, Store

    monkeypatch.setattr(night, "HEARTBEAT_S", 4.0)  # A's first beat: after B took over
    a = Store(store_url, lease_s=0.5)
    b = Store(store_url, lease_s=60)
    runner = Runner(slow=True)
    taken = {}

    def take_over() -> None:
        while not runner.procs:  # A holds the run and runs its first cell
            time.sleep(0.05)
        time.sleep(0.7)  # A's lease lapses (the database's clock)
        held = b.hold("matrix", FACTS, "local", "host-b:1:bbb")
        taken["held"], taken["claimed"] = held, b.claim(held, "m", "c1")

    thief = threading.Thread(target=take_over)
    thief.start()
    started = time.monotonic()
    with pytest.raises(LeaseLost) as e:
        driver(a, runner)
    took = time.monotonic() - started
    thief.join()
    assert took < 10, took  # not the cell's 60 s: ended at the heartbeat
    assert runner.procs[0].returncode == -9  # the cell's process group, killed
    message = str(e.value)
    assert "was taken over by host-b:1:bbb" in message and "\n" not in message
    held_b = taken["held"]
    assert held_b.resumed and taken["claimed"]
    assert b.cells_of(held_b.run_id) == []  # A's killed cell: not recorded
    b.heartbeat(held_b)  # B's claim survived A's stop
    assert b.record_cell(held_b.run_id, _result("m", "c1"), held_b)


def test_a_driver_that_loses_the_database_stops_its_cell(own_pg, driver):
    """The server goes down mid-cell: the heartbeat's tries fail, the cell is ended, the driver
    stops with one line (the heartbeat's error is not swallowed)."""
    from pipeline.nightly.store import Store, StoreError

    url = _with_password(own_pg, own_pg.database())
    store = Store(url, limits=_limits())
    runner = Runner(slow=True)
    halting = threading.Timer(0.5, own_pg.halt)
    halting.start()
    try:
        with pytest.raises(StoreError) as e:
            driver(store, runner)
    finally:
        halting.join()
        own_pg.start()
    assert runner.procs[0].returncode == -9
    message = str(e.value)
    _one_line_without_password(message)
    assert "renewing this driver's leases failed 2 times" in message
    (run,) = store.run_ids()
    assert store.cells_of(run["id"]) == [] and run["ended"] is None  # the next night resumes


def test_a_stopped_driver_ends_its_progress_bar_s_line(capsys, monkeypatch, tmp_path):
    """A driver stopping mid-night (its record refused) closes its bar first: the command's
    `error:` line then starts a line of its own, not after the bar's text in a log."""
    from pipeline.nightly import executors
    from pipeline.nightly.store import LeaseLost

    monkeypatch.setattr(executors, "execute", lambda cell, *_: _result(cell.model, cell.name))

    def refused(result: dict) -> None:
        raise LeaseLost("nightly run r was taken over by host-b:1:bbb")

    # the traceback held (as the CLI holds it while it prints): the bar is not collected first
    with pytest.raises(LeaseLost) as stopped:
        runner = executors.Local(None, Runs(tmp_path / "runs"))
        runner.run(CELLS, str(tmp_path), refused, claim=lambda cell: True)
    err = capsys.readouterr().err
    assert "nightly cells" in err and err.endswith("\n"), repr(err)
    assert stopped.traceback


def test_the_night_says_why_it_did_not_resume():
    from pipeline.nightly import night
    from pipeline.nightly.store import Held

    held = Held("new-run", "me", resumed=False, lease=1, replaced="old-run", why="torch 1 → 2")
    assert night._how(held, 0) == "new: run old-run not resumed, torch 1 → 2 since it started"
    assert night._how(Held("r", "me", resumed=True, lease=2), 3) == (
        "resumed, 3 cells already recorded"
    )


# the command line: never the password, one line each. In this process (pipeline.cli.main, as
# `python -m pipeline` runs it): a fresh interpreter costs seconds to import what they need
def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from pipeline.cli.main import main

    code = main(list(args))
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err, out + err
    return code, out, err


def test_malformed_urls_on_the_command_line_are_one_line(capsys, monkeypatch):
    monkeypatch.delenv("NIGHTLY_DB", raising=False)
    code, _, err = _cli(capsys, "nightly", "--db", f"postgresql//nightly:{PASSWORD}@db/nightly")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--db: postgresql//nightly:***@db/nightly is not a database URL" in err
    monkeypatch.setenv("NIGHTLY_DB", f"postgresql://nightly:{PASSWORD}@127.0.0.1:54x2/nightly")
    code, _, err = _cli(capsys, "report")  # no --db: NIGHTLY_DB
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "NIGHTLY_DB: postgresql://nightly:***@127.0.0.1:54x2/nightly" in err
    assert "its port is not a number" in err


def test_pin_and_report_messages_mask_the_password(postgres, capsys, monkeypatch, tmp_path):
    from pipeline.nightly.store import Store

    monkeypatch.delenv("NIGHTLY_DB", raising=False)
    url = _with_password(postgres, postgres.database())
    shown = url.replace(PASSWORD, "***")
    code, _, err = _cli(capsys, "report", "--db", url, "--out", str(tmp_path))
    assert code == 2 and f"no nightly runs in {shown}" in err, err
    code, _, err = _cli(capsys, "nightly", "--pin-baseline", "nope", "--db", url)
    assert code == 2 and f"no nightly run 'nope' in {shown}" in err, err
    Store(url).start_run("r1", "sha", FACTS, "local")
    code, out, err = _cli(capsys, "nightly", "--pin-baseline", "latest", "--db", url)
    assert code == 0 and f"baseline pinned: r1 ({shown})" in out, out + err


def test_a_locked_or_silent_store_is_one_line_exit_75(capsys, monkeypatch, tmp_path):
    """What clears by itself is no mistake: a SQLite file another process holds locked, a
    PostgreSQL that accepts and never answers. Each one line, exit 75 (EX_TEMPFAIL)."""
    import functools
    import socket
    import sqlite3

    from pipeline.nightly import night
    from pipeline.nightly.store import Store

    monkeypatch.delenv("NIGHTLY_DB", raising=False)
    monkeypatch.setattr(night, "Store", functools.partial(Store, limits=_limits(busy_s=0.5)))
    path = tmp_path / "store.db"
    Store(f"sqlite:///{path}").start_run("r1", "sha", FACTS, "local")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, _, err = _cli(capsys, "nightly", "--pin-baseline", "latest", "--db",
                            f"sqlite:///{path}")  # fmt: skip
    finally:
        holder.close()
    (line,) = err.strip().splitlines()
    assert code == 75 and line.startswith("error: results database sqlite:///"), err
    assert line.endswith("database is locked: try again later, it clears by itself"), line
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"postgresql://nightly:{PASSWORD}@127.0.0.1:{listener.getsockname()[1]}/nightly"
        code, _, err = _cli(capsys, "nightly", "--pin-baseline", "latest", "--db", url)
    (line,) = err.strip().splitlines()
    assert code == 75 and "connection timeout expired: try again later" in line, err


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_read_only_sqlite_file_is_one_line_exit_4(tmp_path):
    """A file and folder without write permission. As root, file modes bind only without the
    capabilities that override them: the command runs without those."""
    from pipeline.nightly.store import Store

    folder = tmp_path / "ro"
    Store(f"sqlite:///{folder}/store.db").start_run("r1", "sha", FACTS, "local")
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)
    try:
        result = _without_dac(tmp_path, "nightly", "--pin-baseline", "latest", "--db",
                              f"sqlite:///{folder}/store.db")  # fmt: skip
    finally:
        folder.chmod(0o755)
    assert result.returncode == 4, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"results database sqlite:///{folder}/store.db (--db): this host cannot use it" in line


def _without_dac(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`python -m pipeline ARGS` without the capabilities by which root overrides file modes."""
    caps = "-dac_override,-dac_read_search"
    cmd = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", "--", sys.executable,
           "-m", "pipeline", *args]  # fmt: skip
    env = {**os.environ, "RUNS_DIR": str(tmp_path / "runs")}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.parametrize("writer", ["closed", "open"])
def test_a_read_only_sqlite_store_is_reported(tmp_path, writer):
    """A store whose file and folder this host may not write is still read (the store says so):
    with no -shm beside it (its writer closed) SQLite may not make one, so the file is read as it
    is (immutable); while a writer holds it open, its night is in the -wal, read through the
    writer's -shm. The report exits 0 with the night; nothing is written beside the store."""
    from pipeline.nightly.store import Store

    folder = tmp_path / "ro"
    store = Store(f"sqlite:///{folder}/store.db")
    store.start_run("r1", "sha", FACTS, "local")
    store.record_cell("r1", _result("m", "c1"))
    store.end_run("r1")
    if writer == "closed":
        store.engine.dispose()  # the last connection: the WAL checkpointed, -wal and -shm gone
    else:
        # the night is in the -wal, not yet in the file
        assert (folder / "store.db-wal").stat().st_size > 0
    before = sorted(p.name for p in folder.iterdir())
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)
    try:
        result = _without_dac(tmp_path, "report", "--db", f"sqlite:///{folder}/store.db",
                              "--out", str(tmp_path / "reports"))  # fmt: skip
        after = sorted(p.name for p in folder.iterdir())
    finally:
        folder.chmod(0o755)
        store.engine.dispose()
    assert result.returncode == 0, result.stdout + result.stderr
    assert after == before
    (summary,) = (tmp_path / "reports").glob("*/summary.md")
    text = summary.read_text()
    assert "Latest run `r1`" in text and "1 runs in the store" in text, text
    assert "m            c1             ok" in text, text
