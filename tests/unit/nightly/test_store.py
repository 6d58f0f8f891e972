"""The results store on SQLite and PostgreSQL alike: concurrent writers, two drivers on one
matrix, schema upgrades of an earlier database. The drivers here are the store's own protocol
(hold a run, claim a cell, record it) in separate processes; a cell's work is a short sleep
instead of a pipeline run (tests/e2e/nightly runs real cells)."""

import json
import multiprocessing
import time

import pytest
from sqlalchemy import create_engine, text

FACTS = {"git": {}, "libraries": {}, "host": {}}


def _result(model: str, cell: str, n: int = 3) -> dict:
    metrics = [
        {"name": f"x{k}", "value": k, "se": 0.1, "better": "lower", "kind": "quality"}
        for k in range(n)
    ]
    where = {"node": "node-a", "gpus": ["0", "1"]}
    return {"model": model, "cell": cell, "recipe": "r", "status": "ok", "stages": {},
            "metrics": metrics, "where": where}  # fmt: skip


def _write_many(db: str, writer: int, n: int) -> None:
    from pipeline.nightly.store import Store

    store = Store(db)
    for i in range(n):
        run_id = f"w{writer}-{i}"
        store.start_run(run_id, "sha", FACTS, "local")
        store.record_cell(run_id, _result("m", "c", 20))
        store.end_run(run_id)


def test_two_writers_at_once(store_url):
    from pipeline.nightly.store import Store

    Store(store_url)  # schema first, as a running nightly would have
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(store_url, w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    store = Store(store_url)
    runs = store.run_ids()
    assert len(runs) == 80 and all(r["ended"] for r in runs)
    assert all(len(store.metrics_of(r["id"], "m", "c")) == 20 for r in runs)


CELLS = [("m1", f"c{i}") for i in range(12)] + [("m2", f"c{i}") for i in range(12)]


def _driver(db: str, name: str, out: str) -> None:
    from pipeline.nightly.store import Store

    store = Store(db)
    held = store.hold("matrix", FACTS, "local", name)
    ran = []
    for model, cell in CELLS:
        if store.claim(held, model, cell):
            time.sleep(0.05)  # the cell's work
            assert store.record_cell(held.run_id, _result(model, cell), held)
            ran.append([model, cell])
    recorded = {(c["model"], c["cell"]) for c in store.cells_of(held.run_id)}
    if recorded == set(CELLS):
        store.end_run(held.run_id)
    with open(out, "w") as f:
        json.dump({"run": held.run_id, "joined": held.joined, "ran": ran}, f)


def test_two_drivers_on_one_matrix_record_every_cell_once(store_url, tmp_path):
    from pipeline.nightly.store import Store

    Store(store_url)
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"d{i}.json" for i in range(2)]
    procs = [
        ctx.Process(target=_driver, args=(store_url, f"driver-{i}", str(outs[i]))) for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]  # neither crashed (no duplicate insert)
    a, b = (json.loads(o.read_text()) for o in outs)
    assert a["run"] == b["run"]  # one run of the matrix, not two
    assert a["joined"] or b["joined"] or not (a["ran"] and b["ran"])
    ran = [tuple(x) for x in a["ran"] + b["ran"]]
    assert sorted(ran) == sorted(CELLS)  # every cell run once, by one of them
    store = Store(store_url)
    (run,) = store.run_ids()
    assert run["ended"] and len(store.cells_of(run["id"])) == len(CELLS)
    assert store.unfinished_run("matrix") is None
    (cell,) = [c for c in store.cells_of(run["id"]) if c["cell"] == "c0" and c["model"] == "m1"]
    assert cell["node"] == "node-a" and cell["gpus"] == ["0", "1"]


def test_a_silent_driver_loses_its_run_and_its_claims(store_url):
    from pipeline.nightly.store import LeaseLost, Store

    first = Store(store_url, lease_s=1)
    held = first.hold("matrix", FACTS, "local", "dead-driver")
    assert first.claim(held, "m", "c")
    live = Store(store_url, lease_s=1)
    joined = live.hold("matrix", FACTS, "local", "second")
    assert joined.run_id == held.run_id and joined.holder == "dead-driver"
    assert not live.claim(joined, "m", "c")  # its claim holds while it beats
    first.heartbeat(held)
    time.sleep(2.1)  # then it goes silent past the lease
    taken = live.hold("matrix", FACTS, "local", "third")
    assert taken.run_id == held.run_id and not taken.joined and taken.resumed
    assert taken.lease == held.lease + 1  # the fencing token moved on
    assert live.claim(taken, "m", "c")
    assert live.record_cell(held.run_id, _result("m", "c"), taken)
    with pytest.raises(LeaseLost):  # late, and no longer its run: refused, recorded once
        first.record_cell(held.run_id, _result("m", "c"), held)
    assert len(live.metrics_of(held.run_id, "m", "c")) == 3


def test_a_killed_driver_on_this_host_is_gone_at_once(store_url):
    """Its process is no more: the next `make nightly` here resumes without waiting a lease."""
    import socket
    import subprocess

    from pipeline.nightly.store import Store

    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid names no process now
    dead = f"{socket.gethostname()}:{child.pid}:x"
    store = Store(store_url)  # the default lease: minutes
    held = store.hold("matrix", FACTS, "local", dead)
    assert store.claim(held, "m", "c")
    again = store.hold("matrix", FACTS, "local", "next")
    assert again.run_id == held.run_id and again.resumed and not again.joined
    assert store.claim(again, "m", "c")


def test_new_starts_another_run_even_with_one_unfinished(store_url):
    from pipeline.nightly.store import Store

    store = Store(store_url)
    old = store.hold("matrix", FACTS, "local", "a")
    fresh = store.hold("matrix", FACTS, "local", "a", new=True)
    assert fresh.run_id != old.run_id and not fresh.resumed
    assert store.unfinished_run("matrix") == fresh.run_id


def _first_schema(url: str) -> None:
    """A database as the nightly wrote it before migrations (create_all, no alembic_version),
    with an interrupted run in it."""
    from alembic import command
    from alembic.config import Config

    from pipeline.nightly import schema

    engine = create_engine(url)
    with engine.begin() as c:
        cfg = Config()
        cfg.set_main_option("script_location", str(schema.MIGRATIONS))
        cfg.attributes["connection"] = c
        command.upgrade(cfg, schema.FIRST)
        c.execute(text("DROP TABLE alembic_version"))
        c.execute(text(
            "INSERT INTO runs (id, started, matrix_sha, executor) VALUES "
            "('old-done', '2026-11-01T00:00:00+00:00', 'sha', 'local'), "
            "('old-cut', '2026-11-02T00:00:00+00:00', 'sha', 'local')"
        ))  # fmt: skip
        c.execute(text("UPDATE runs SET ended = '2026-11-01T01:00:00+00:00' WHERE id = 'old-done'"))
        c.execute(text(
            "INSERT INTO cells (run_id, model, cell, recipe, status, finished) VALUES "
            "('old-cut', 'm', 'c', 'fp8', 'ok', '2026-11-02T00:10:00+00:00')"
        ))  # fmt: skip
        c.execute(text(
            "INSERT INTO metrics (run_id, model, cell, name, value, better, kind) VALUES "
            "('old-cut', 'm', 'c', 'kl_mean', 0.01, 'lower', 'quality')"
        ))  # fmt: skip
    engine.dispose()


def test_a_database_of_the_first_schema_upgrades_in_place(store_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from pipeline.nightly import schema
    from pipeline.nightly.store import Store, meta

    _first_schema(store_url)
    store = Store(store_url)
    with store.engine.connect() as c:
        assert schema.current(c) == schema.HEAD
        assert compare_metadata(MigrationContext.configure(c), meta) == []  # tables == code
    assert [r["id"] for r in store.run_ids()] == ["old-done", "old-cut"]
    assert store.metrics_of("old-cut", "m", "c")["kl_mean"].value == 0.01
    assert store.unfinished_run("sha") == "old-cut"  # the interrupted run stays resumable
    held = store.hold("sha", FACTS, "local", "me")
    assert held.run_id == "old-cut" and held.resumed and not held.joined


def test_a_new_database_has_the_code_s_tables(store_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from pipeline.nightly.store import Store, meta

    store = Store(store_url)
    Store(store_url)  # opening again: nothing to upgrade
    with store.engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), meta) == []


def test_an_unreachable_database_is_one_line_without_its_password(postgres):
    from pipeline.core.errors import UserError
    from pipeline.nightly.store import Store

    url = "postgresql+psycopg://team:s3cret@127.0.0.1:1/nightly"
    with pytest.raises(UserError) as e:
        Store(url)
    assert "s3cret" not in str(e.value) and "\n" not in str(e.value)
    assert "results database postgresql+psycopg://team:***@127.0.0.1:1/nightly" in str(e.value)


def test_a_plain_postgresql_url_uses_the_pinned_driver(postgres):
    """postgresql://… as teams write it (SQLAlchemy alone would look for psycopg2)."""
    from pipeline.nightly.store import Store

    url = postgres.database().replace("postgresql+psycopg://", "postgresql://")
    store = Store(url)
    assert store.engine.dialect.driver == "psycopg" and store.run_ids() == []
