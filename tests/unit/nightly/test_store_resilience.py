"""The store when things go wrong (issue 45), on SQLite and on real PostgreSQL servers: a metric
that is NaN or infinite, a server restarted or stalled mid-night, a server that accepts TCP and
never answers, a driver whose lease lapsed while it lived (fencing on the database's clock), a
resumed run of another commit, and databases the store may not use (newer schema, read-only,
no privileges) — each a line naming NIGHTLY_DB / --db, never with the password. Issue 53: a
fenced driver's results refused and the owner's recorded; what clears by itself (a locked file,
a server silent at start) exit 75, not a mistake. The disruptive tests stop and restart a
server of their own (`own_pg`, conftest.py), not the session's."""

import math
import socket
import threading
import time

import pytest
from sqlalchemy import create_engine, exc, text

from tests.unit.nightly.test_store import FACTS, _result

PASSWORD = "Pw-7f3Zq9-planted"  # searched for in every message below
# short timeouts, so a failure is seconds: 3 s a try, 2 tries, 0.5 s between
FAST = {"connect_s": 1, "statement_s": 1, "margin_s": 1, "busy_s": 2, "attempts": 2,
        "backoff_s": (0.5,)}  # fmt: skip


def _limits(**changes):
    from pipeline.nightly.store import Limits

    return Limits(**{**FAST, **changes})


def _one_line_without_password(message: str) -> None:
    assert PASSWORD not in message and "\n" not in message.strip(), message


def _with_password(server, url: str) -> str:
    """The database of `url` as a role that owns it, with the planted password."""
    name = url.rsplit("/", 1)[1]
    return server.role(url, PASSWORD, (f'ALTER DATABASE "{name}" OWNER TO {{role}}',
                                       "GRANT ALL ON SCHEMA public TO {role}"))  # fmt: skip


def test_a_driver_gives_up_before_its_lease_lapses():
    """A heartbeat's every try and wait (LIMITS.worst_s) end before the lease could lapse, so a
    driver cut off from the database has stopped its cells before another may take them."""
    from pipeline.nightly.store import HEARTBEAT_S, LEASE_S, LIMITS

    assert HEARTBEAT_S + LIMITS.worst_s < LEASE_S
    assert _limits().worst_s == 2 * 3 + 0.5  # what the tests below are bounded by


# NaN and infinity
def test_nan_and_infinity_are_recorded_and_read_back(store_url):
    """SQLite stores a NaN as NULL: the cell used to vanish (its IntegrityError read as another
    driver's record). Now every value comes back as it went in."""
    from pipeline.nightly.store import Store

    store = Store(store_url)
    store.start_run("r", "sha", FACTS, "local")
    result = _result("m", "c", 0)
    result["metrics"] = [
        {"name": "kl_mean", "value": float("nan"), "se": float("nan"), "better": "lower",
         "kind": "quality"},
        {"name": "ppl_ratio", "value": float("inf"), "se": None, "better": "lower",
         "kind": "quality"},
        {"name": "delta", "value": float("-inf"), "se": 0.5, "better": "higher",
         "kind": "quality"},
    ]  # fmt: skip
    assert store.record_cell("r", result)
    got = store.metrics_of("r", "m", "c")
    assert math.isnan(got["kl_mean"].value) and math.isnan(got["kl_mean"].se)
    assert got["ppl_ratio"].value == math.inf and got["ppl_ratio"].se is None
    assert got["delta"].value == -math.inf and got["delta"].se == 0.5
    assert [c["status"] for c in store.cells_of("r")] == ["ok"]
    assert math.isnan(next(h["value"] for h in store.history() if h["name"] == "kl_mean"))


def test_an_integrity_error_is_not_taken_for_another_driver_s_record(store_url):
    """A cell that cannot be written (here: one metric twice) raises: it is not reported as
    recorded by someone else while no row exists."""
    from pipeline.nightly.store import Store

    store = Store(store_url)
    store.start_run("r", "sha", FACTS, "local")
    result = _result("m", "c", 1)
    result["metrics"] *= 2
    with pytest.raises(exc.IntegrityError):
        store.record_cell("r", result)
    assert store.cells_of("r") == []
    assert store.record_cell("r", _result("m", "c"))  # a good one goes in afterwards
    assert not store.record_cell("r", _result("m", "c"))  # and once


# a server that goes away, or stops answering
def test_a_restart_between_two_records_is_survived(own_pg):
    from pipeline.nightly.store import Store

    store = Store(own_pg.database(), limits=_limits())
    held = store.hold("matrix", FACTS, "local", "driver")
    assert store.claim(held, "m", "c1")
    assert store.record_cell(held.run_id, _result("m", "c1"), held)
    own_pg.restart()  # every pooled connection is dead now
    assert store.claim(held, "m", "c2")  # pre-ping: a fresh connection
    assert store.record_cell(held.run_id, _result("m", "c2"), held)
    store.heartbeat(held)
    assert sorted(c["cell"] for c in store.cells_of(held.run_id)) == ["c1", "c2"]
    assert all(len(store.metrics_of(held.run_id, "m", c)) == 3 for c in ("c1", "c2"))


def test_a_record_is_retried_while_the_server_comes_back(own_pg):
    """Down when the record starts, up again a second later: the record's later try lands."""
    from pipeline.nightly.store import Store

    store = Store(own_pg.database(), limits=_limits(attempts=4, backoff_s=(1.0,)))
    store.start_run("r", "sha", FACTS, "local")
    own_pg.halt()
    back = threading.Timer(1.0, own_pg.start)
    back.start()
    try:
        assert store.record_cell("r", _result("m", "c"))
    finally:
        back.join()
    assert len(store.cells_of("r")) == 1 and len(store.metrics_of("r", "m", "c")) == 3


def test_a_stalled_server_fails_within_its_limits_in_one_line(own_pg):
    """The server and its backends stopped (SIGSTOP): keepalives are answered by the kernel and
    statement_timeout is the server's own, so only the store's deadline ends the wait."""
    from pipeline.nightly.store import Store, StoreError

    url = _with_password(own_pg, own_pg.database())
    store = Store(url, limits=_limits())
    store.start_run("r", "sha", FACTS, "local")
    assert store.record_cell("r", _result("m", "c1"))  # a pooled connection, now idle
    with own_pg.stalled():
        started = time.monotonic()
        with pytest.raises(StoreError) as e:
            store.record_cell("r", _result("m", "c2"))
        took = time.monotonic() - started
    assert took < store.limits.worst_s + 3, took
    message = str(e.value)
    _one_line_without_password(message)
    assert "recording m × c2 failed 2 times" in message and ":***@127.0.0.1" in message
    assert store.record_cell("r", _result("m", "c2"))  # back: the same store goes on


def test_a_statement_stuck_behind_a_lock_times_out(own_pg):
    """A backend that answers but waits on another session's lock: statement_timeout."""
    import psycopg

    from pipeline.nightly.store import Store, StoreError

    url = own_pg.database()
    store = Store(url, limits=_limits())
    store.start_run("r", "sha", FACTS, "local")
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as blocker:
        blocker.execute("LOCK TABLE cells IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(StoreError, match="canceling statement due to statement timeout"):
            store.record_cell("r", _result("m", "c"))
        assert time.monotonic() - started < store.limits.worst_s + 2
        blocker.rollback()
    assert store.record_cell("r", _result("m", "c"))


def test_a_server_that_never_answers_is_a_connect_timeout(tmp_path):
    """Something on the port accepts TCP and says nothing: the store gives up after
    connect_timeout, in one line without the password — exit 75, try again later: a server
    still starting or overloaded answers later, and no URL was wrong."""
    from pipeline.core.errors import Transient
    from pipeline.nightly.store import Store

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        url = f"postgresql://nightly:{PASSWORD}@127.0.0.1:{port}/nightly"
        started = time.monotonic()
        with pytest.raises(Transient) as e:
            Store(url, limits=_limits(connect_s=2))
        took = time.monotonic() - started
    assert 1.5 < took < 8, took
    _one_line_without_password(str(e.value))
    assert f"nightly:***@127.0.0.1:{port}/nightly" in str(e.value)
    assert "NIGHTLY_DB or --db" in str(e.value) and "try again later" in str(e.value)
    assert e.value.exit_code == 75 and e.value.reason == "transient"


def test_a_server_stalled_at_start_is_transient(own_pg):
    """The real server stopped (SIGSTOP) as a store opens: exit 75, where a database name or a
    role the same server does not know stays a mistake (exit 2; its authentication is `trust`,
    so a wrong password is not one here)."""
    from pipeline.core.errors import Transient, UserError
    from pipeline.nightly.store import Store

    url = _with_password(own_pg, own_pg.database())
    with own_pg.stalled(), pytest.raises(Transient) as e:
        Store(url, limits=_limits())
    _one_line_without_password(str(e.value))
    assert "connection timeout expired: try again later" in str(e.value), e.value
    no_role = url.replace("://r_", "://nobody_r_", 1)
    for wrong in (url.rsplit("/", 1)[0] + "/no_such_db", no_role):
        with pytest.raises(UserError) as e:
            Store(wrong, limits=_limits())
        assert e.value.exit_code == 2 and "does not exist" in str(e.value), e.value


def test_a_server_silent_past_the_deadline_at_start_is_transient(postgres, monkeypatch):
    """Connected, then no answer (here a statement that sleeps with no statement_timeout): the
    store's deadline cuts the connection as it opens, and says so — exit 75."""
    from pipeline.core.errors import Transient
    from pipeline.nightly import schema
    from pipeline.nightly.store import Store

    def silent(engine) -> None:
        with engine.connect() as c:
            c.execute(text("SET statement_timeout = 0"))
            c.execute(text("SELECT pg_sleep(10)"))

    monkeypatch.setattr(schema, "upgrade", silent)
    started = time.monotonic()
    with pytest.raises(Transient, match=r"no answer within 3 s: try again later"):
        Store(postgres.database(), limits=_limits())
    assert time.monotonic() - started < 8


def test_an_upgrader_s_lock_at_start_is_transient(own_pg):
    """Another session holds the schema's table (an upgrade under way) past statement_timeout:
    exit 75, not a mistake."""
    import psycopg

    from pipeline.core.errors import Transient
    from pipeline.nightly.store import Store

    url = own_pg.database()
    Store(url).close()
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as upgrader:
        upgrader.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(Transient, match="statement timeout: try again later"):
            Store(url, limits=_limits())
        upgrader.rollback()
    Store(url, limits=_limits()).close()  # released: it opens


def test_a_locked_sqlite_file_is_transient(tmp_path):
    """Another process holds the file's write lock past the busy timeout, as the store opens
    and after a call's tries: exit 75, where it was a mistake (2) and an internal error (1)."""
    import sqlite3

    from pipeline.core.errors import Transient
    from pipeline.nightly.store import Store

    path = tmp_path / "store.db"
    store = Store(f"sqlite:///{path}", limits=_limits(busy_s=0.5))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(Transient, match="database is locked: try again later") as opening:
            Store(f"sqlite:///{path}", limits=_limits(busy_s=0.5))
        with pytest.raises(Transient) as writing:
            store.start_run("r", "sha", FACTS, "local")
    finally:
        holder.rollback()
        holder.close()
    for e in (opening, writing):
        assert e.value.exit_code == 75 and "\n" not in str(e.value)
    assert "starting run r failed 2 times: database is locked" in str(writing.value)
    store.start_run("r", "sha", FACTS, "local")  # released: it goes on


# leases, fencing and the database's clock
def _lapsed_pair(store_url):
    """Driver A held the run and claimed m × c; its lease lapsed while it lived; driver B took
    the run over and the claim with it."""
    from pipeline.nightly.store import Store

    a = Store(store_url, lease_s=1)
    held_a = a.hold("matrix", FACTS, "local", "host-a:1:aaa")
    assert a.claim(held_a, "m", "c")
    time.sleep(1.5)  # past the lease on the database's clock
    b = Store(store_url, lease_s=60)
    held_b = b.hold("matrix", FACTS, "local", "host-b:1:bbb")
    assert held_b.run_id == held_a.run_id and held_b.resumed and not held_b.joined
    assert held_b.lease == held_a.lease + 1
    assert b.claim(held_b, "m", "c")
    return a, held_a, b, held_b


def test_a_fenced_driver_is_refused_and_told(store_url):
    from pipeline.nightly.store import LeaseLost

    a, held_a, b, held_b = _lapsed_pair(store_url)
    with pytest.raises(LeaseLost) as beat:
        a.heartbeat(held_a)
    assert "taken over by host-b:1:bbb" in str(beat.value) and "\n" not in str(beat.value)
    with pytest.raises(LeaseLost):
        a.claim(held_a, "m", "other")
    with pytest.raises(LeaseLost, match="not recorded: that driver runs the cell"):
        a.record_cell(held_a.run_id, {**_result("m", "c"), "status": "failed"}, held_a)
    assert b.cells_of(held_b.run_id) == []
    b.heartbeat(held_b)  # B's leases are untouched
    assert b.record_cell(held_b.run_id, _result("m", "c"), held_b)


# B's own result for the cell A lost: another status and other metrics than A's
OWNERS = {**_result("m", "c", 5), "status": "gate_failed"}


def _owners_result_is_recorded(b, held_b) -> None:
    (cell,) = b.cells_of(held_b.run_id)
    assert cell["status"] == "gate_failed", cell
    assert sorted(b.metrics_of(held_b.run_id, "m", "c")) == ["x0", "x1", "x2", "x3", "x4"]


def test_a_fenced_driver_s_ok_is_refused_and_the_owner_s_result_recorded(store_url):
    """A finished the cell before it learned: a fencing token refuses the stale holder's writes,
    its `ok` included (it used to be kept, and B's own result dropped unrecorded)."""
    from pipeline.nightly.store import LeaseLost

    a, held_a, b, held_b = _lapsed_pair(store_url)
    with pytest.raises(LeaseLost, match="its result is not recorded") as e:
        a.record_cell(held_a.run_id, _result("m", "c"), held_a)
    assert "taken over by host-b:1:bbb" in str(e.value) and "\n" not in str(e.value)
    assert b.cells_of(held_b.run_id) == []
    assert b.record_cell(held_b.run_id, OWNERS, held_b)
    _owners_result_is_recorded(b, held_b)
    assert not b.record_cell(held_b.run_id, _result("m", "c"), held_b)  # then: once


def test_the_claim_holder_s_result_replaces_a_row_written_without_its_claim(store_url):
    """A row in the cell that the holder of its claim did not write (a stale holder's, as the
    store let one through before its fence held) gives way to the owner's result, even an `ok`
    to its `gate_failed`."""
    from pipeline.nightly.store.recording import insert_cell

    _, held_a, b, held_b = _lapsed_pair(store_url)
    with b.engine.begin() as c:  # A's row, written behind the store's back
        insert_cell(c, {"run_id": held_a.run_id, "model": "m", "cell": "c"}, _result("m", "c"))
    assert b.record_cell(held_b.run_id, OWNERS, held_b)
    _owners_result_is_recorded(b, held_b)


def test_a_takeover_waits_for_a_record_under_way(store_url, monkeypatch):
    """A's record checked its lease and is writing when B takes the run over: B's takeover
    waits for that transaction, so A's result is in before B holds the run (B then finds the
    cell recorded), never written after B took over."""
    from pipeline.nightly.store import Store, recording

    a = Store(store_url, lease_s=1)
    held_a = a.hold("matrix", FACTS, "local", "host-a:1:aaa")
    assert a.claim(held_a, "m", "c")
    time.sleep(1.5)  # A's lease lapses on the database's clock; A does not know yet
    writing, write, written = threading.Event(), recording.write, []

    def slow_write(*args, **kwargs):
        writing.set()
        time.sleep(1.0)  # inside A's transaction, its lease checked
        written.append(time.monotonic())
        return write(*args, **kwargs)

    monkeypatch.setattr(recording, "write", slow_write)
    b = Store(store_url, lease_s=60)
    taken = {}

    def take_over() -> None:
        writing.wait(10)
        taken["held"] = b.hold("matrix", FACTS, "local", "host-b:1:bbb")
        taken["at"] = time.monotonic()
        taken["claimed"] = b.claim(taken["held"], "m", "c")

    thief = threading.Thread(target=take_over)
    thief.start()
    assert a.record_cell(held_a.run_id, _result("m", "c"), held_a)
    thief.join(30)
    assert taken["at"] > written[0]  # B held the run only once A's write was in
    assert taken["held"].lease == held_a.lease + 1 and not taken["claimed"]
    (cell,) = b.cells_of(held_a.run_id)
    assert cell["status"] == "ok" and len(b.metrics_of(held_a.run_id, "m", "c")) == 3


def test_leases_are_judged_on_the_database_clock(store_url, monkeypatch):
    """A driver whose own clock runs an hour ahead does not take a live driver's run."""
    from pipeline.nightly.store import Store, clock

    first = Store(store_url, lease_s=60)
    held = first.hold("matrix", FACTS, "local", "elsewhere:1:aaa")
    ahead = clock.now
    monkeypatch.setattr(clock, "now", lambda offset_s=0: ahead(offset_s + 3600))
    second = Store(store_url, lease_s=60).hold("matrix", FACTS, "local", "here:1:bbb")
    assert second.joined and second.holder == "elsewhere:1:aaa" and second.lease is None
    assert 0 <= second.holder_seen_s < 30
    first.heartbeat(held)  # still its run


def test_a_stopping_driver_frees_its_claims_and_lease(store_url):
    from pipeline.nightly.store import Store

    store = Store(store_url)
    held = store.hold("matrix", FACTS, "local", "elsewhere:1:aaa")
    assert store.claim(held, "m", "c")
    store.release(held)
    other = store.hold("matrix", FACTS, "local", "here:1:bbb")  # no lapse to wait for
    assert other.resumed and not other.joined and store.claim(other, "m", "c")


# a run is one commit and one set of library versions
def _facts(commit: str, torch: str = "2.13.0") -> dict:
    return {"git": {"commit": commit, "dirty": False}, "libraries": {"torch": torch},
            "host": {"gpus": []}}  # fmt: skip


def test_a_run_of_another_commit_is_not_resumed(store_url):
    from pipeline.nightly.store import Store

    store = Store(store_url, lease_s=1)
    old = store.hold("matrix", _facts("a" * 40), "local", "gone:1:aaa")
    store.release(old)  # its driver died
    again = store.hold("matrix", _facts("a" * 40, torch="2.14.0"), "local", "next:1:bbb")
    assert not again.resumed and again.replaced == old.run_id
    assert again.why == "torch 2.13.0 → 2.14.0"
    store.release(again)
    newer = store.hold("matrix", _facts("b" * 40, torch="2.14.0"), "local", "next:1:ccc")
    assert newer.replaced == again.run_id and newer.why == f"commit {'a' * 12} → {'b' * 12}"
    assert store.unfinished_run("matrix") == newer.run_id
    same = store.hold("matrix", _facts("b" * 40, torch="2.14.0"), "local", "next:1:ddd")
    assert same.run_id == newer.run_id and same.joined  # same facts: joined as before


def test_a_running_night_of_another_commit_is_not_joined(store_url):
    from pipeline.core.errors import UserError
    from pipeline.nightly.store import Store

    store = Store(store_url)
    store.hold("matrix", _facts("a" * 40), "local", "elsewhere:1:aaa")
    with pytest.raises(UserError) as e:
        store.hold("matrix", _facts("b" * 40), "local", "here:1:bbb")
    assert "running under elsewhere:1:aaa" in str(e.value) and "commit aaaaaaaaaaaa →" in str(
        e.value
    )


def test_a_database_of_the_second_schema_keeps_its_interrupted_run(store_url):
    """0002's leases were text on each driver's clock: upgraded, they are lapsed (their
    drivers run the earlier code), so the interrupted run is resumed at once, its claim free."""
    from alembic import command
    from alembic.config import Config

    from pipeline.nightly import schema
    from pipeline.nightly.store import Store

    engine = create_engine(store_url)
    with engine.begin() as c:
        cfg = Config()
        cfg.set_main_option("script_location", str(schema.MIGRATIONS))
        cfg.attributes["connection"] = c
        command.upgrade(cfg, "0002")
        c.execute(text(
            "INSERT INTO runs (id, started, matrix_sha, executor, owner, heartbeat) VALUES "
            "('cut', '2026-11-02T00:00:00+00:00', 'sha', 'local', 'old:1:x', "
            "'2999-01-01T00:00:00+00:00')"
        ))  # fmt: skip
        c.execute(text("INSERT INTO current_runs (matrix_sha, run_id) VALUES ('sha', 'cut')"))
        c.execute(text(
            "INSERT INTO claims (run_id, model, cell, owner, heartbeat) VALUES "
            "('cut', 'm', 'c', 'old:1:x', '2999-01-01T00:00:00+00:00')"
        ))  # fmt: skip
    engine.dispose()
    store = Store(store_url)
    held = store.hold("sha", FACTS, "local", "me")
    assert held.run_id == "cut" and held.resumed and not held.joined and held.lease == 1
    assert store.claim(held, "m", "c")


# databases the store may not use: one line each, naming where the URL came from
def test_a_database_of_a_newer_schema_is_refused(store_url):
    from pipeline.core.errors import UserError
    from pipeline.nightly.store import Store

    Store(store_url)
    engine = create_engine(store_url)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(UserError) as e:
        Store(store_url, source="NIGHTLY_DB")
    assert "schema revision 0099, newer than this checkout knows" in str(e.value)
    assert "point NIGHTLY_DB at another database" in str(e.value)


def test_a_read_only_sqlite_store_is_read_but_not_written(tmp_path):
    """A file SQLite may only read (here opened read-only: as root, file modes do not stop
    us): a report reads it; a night or a pin is refused up front, exit 4."""
    from pipeline.core.errors import NotOnThisHost
    from pipeline.nightly.store import Store

    path = tmp_path / "store.db"
    writer = Store(f"sqlite:///{path}")
    writer.start_run("r", "sha", FACTS, "local")
    writer.engine.dispose()
    store = Store(f"sqlite:///file:{path}?mode=ro&uri=true", source="--db")
    assert [r["id"] for r in store.run_ids()] == ["r"]
    for write in (store.require_writable, lambda: store.pin("r")):
        with pytest.raises(NotOnThisHost) as e:
            write()
        assert "this host cannot use it (attempt to write a readonly database)" in str(e.value)
        assert "point --db at a writable place" in str(e.value) and e.value.exit_code == 4


def test_a_user_without_create_is_one_line(own_pg):
    from pipeline.core.errors import UserError
    from pipeline.nightly.store import Store

    url = own_pg.role(own_pg.database(), PASSWORD)  # PostgreSQL 15: no CREATE on public
    with pytest.raises(UserError) as e:
        Store(url, source="NIGHTLY_DB")
    message = str(e.value)
    _one_line_without_password(message)
    assert "may not create or write the store's tables (permission denied for schema public)" in (
        message
    )
    assert "point NIGHTLY_DB at a database it owns" in message and ":***@127.0.0.1" in message


def test_a_read_only_user_reads_and_is_refused_a_write(own_pg):
    from pipeline.core.errors import UserError
    from pipeline.nightly.store import Store

    url = own_pg.database()
    Store(url).start_run("r", "sha", FACTS, "local")
    reader = own_pg.role(url, PASSWORD, ("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}",))
    store = Store(reader)
    assert [r["id"] for r in store.run_ids()] == ["r"]
    with pytest.raises(UserError) as e:
        store.hold("matrix", FACTS, "local", "me")
    _one_line_without_password(str(e.value))
    assert "may not create or write the store's tables" in str(e.value)


@pytest.mark.parametrize(
    "url, why",
    [
        (f"postgresql//nightly:{PASSWORD}@db/nightly", "is not a database URL"),
        (f" postgresql://nightly:{PASSWORD}@db/nightly", "starts or ends with a space"),
        (f"postgresql://nightly:{PASSWORD}@x@db/nightly", "unescaped @"),
        (f"postgresql://nightly:{PASSWORD}@db:54x2/nightly", "its port is not a number"),
        (f"nosuchdb://nightly:{PASSWORD}@db/nightly", "nosuchdb"),
    ],
)
def test_a_malformed_url_is_one_line_without_its_password(url, why):
    from pipeline.core.errors import UserError
    from pipeline.nightly.store import Store

    with pytest.raises(UserError) as e:
        Store(url)
    _one_line_without_password(str(e.value))
    assert why in str(e.value) and "nightly:***@" in str(e.value)
