"""The results database of nightly runs: SQLite by default, any SQLAlchemy URL for a team.

    runs       one row per nightly run: id, times, git commit, library versions, host, matrix
    cells      one row per (run, model, cell): status, error, the recipe overrides' hash
    metrics    one row per (run, model, cell, metric): value, standard error, which way is better
    baselines  pinned runs to compare against (name → run id)

Two writers at once (two nightlies, or a report reading while a nightly writes): each cell is
written in one transaction; SQLite runs in WAL mode with a busy timeout, so a second writer
waits instead of failing with "database is locked".
"""

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import (
    JSON,
    Column,
    Float,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    insert,
    select,
    update,
)

from pipeline.core.errors import UserError

meta = MetaData()
runs = Table(
    "runs",
    meta,
    Column("id", String(40), primary_key=True),
    Column("started", String(32), nullable=False),
    Column("ended", String(32)),  # null: still running, or interrupted (then resumed)
    Column("matrix_sha", String(64), nullable=False),
    Column("git", JSON),
    Column("libraries", JSON),
    Column("host", JSON),
    Column("executor", String(16)),
)
cells = Table(
    "cells",
    meta,
    Column("run_id", String(40), primary_key=True),
    Column("model", String(200), primary_key=True),
    Column("cell", String(200), primary_key=True),
    Column("recipe", String(200), nullable=False),
    Column("overrides_sha", String(64)),
    Column("status", String(16), nullable=False),  # ok | gate_failed | failed | skipped
    Column("error", Text),
    Column("stages", JSON),  # stage → done | cached | failed | skipped, and why
    Column("finished", String(32), nullable=False),
)
metrics = Table(
    "metrics",
    meta,
    Column("run_id", String(40), primary_key=True),
    Column("model", String(200), primary_key=True),
    Column("cell", String(200), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("value", Float, nullable=False),
    Column("se", Float),  # standard error, where the metric has one
    Column("better", String(8), nullable=False),  # higher | lower
    Column("kind", String(16), nullable=False),  # quality | throughput | memory
)
baselines = Table(
    "baselines",
    meta,
    Column("name", String(64), primary_key=True),
    Column("run_id", String(40), nullable=False),
    Column("pinned", String(32), nullable=False),
)


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    se: float | None
    better: str
    kind: str


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Store:
    def __init__(self, url: str):
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(
                parents=True, exist_ok=True
            )
        try:
            self.engine = create_engine(url, connect_args=_connect_args(url))
        except Exception as e:  # bad URL, missing driver: one line for the user
            raise UserError(f"results database {url!r}: {e}") from None
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        meta.create_all(self.engine)

    # writes
    def start_run(self, run_id: str, matrix_sha: str, facts: dict, executor: str) -> None:
        """facts: {"git", "libraries", "host"} of the machine that drives the run."""
        with self.engine.begin() as c:
            c.execute(
                insert(runs).values(
                    id=run_id, started=now(), matrix_sha=matrix_sha, executor=executor, **facts
                )
            )

    def end_run(self, run_id: str) -> None:
        with self.engine.begin() as c:
            c.execute(update(runs).where(runs.c.id == run_id).values(ended=now()))

    def record_cell(self, run_id: str, result: dict) -> None:
        """A cell's status and all its metrics, in one transaction (all or nothing)."""
        key = {"run_id": run_id, "model": result["model"], "cell": result["cell"]}
        with self.engine.begin() as c:
            c.execute(
                insert(cells).values(
                    **key,
                    recipe=result["recipe"],
                    overrides_sha=result.get("overrides_sha"),
                    status=result["status"],
                    error=result.get("error"),
                    stages=result.get("stages"),
                    finished=now(),
                )
            )
            rows = [{**key, **m} for m in result.get("metrics", [])]
            if rows:
                c.execute(insert(metrics), rows)

    def pin(self, run_id: str, name: str = "default") -> None:
        with self.engine.begin() as c:
            if c.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
                raise UserError(f"no nightly run '{run_id}' in {self.url}")
            c.execute(baselines.delete().where(baselines.c.name == name))
            c.execute(insert(baselines).values(name=name, run_id=run_id, pinned=now()))

    # reads
    def unfinished_run(self, matrix_sha: str) -> str | None:
        """The latest run of this matrix that never ended (interrupted): resumed, not redone."""
        with self.engine.connect() as c:
            row = c.execute(
                select(runs.c.id, runs.c.ended)
                .where(runs.c.matrix_sha == matrix_sha)
                .order_by(runs.c.started.desc(), runs.c.id.desc())
                .limit(1)
            ).first()
        return row.id if row and row.ended is None else None

    def cells_of(self, run_id: str) -> list[dict]:
        with self.engine.connect() as c:
            rows = c.execute(select(cells).where(cells.c.run_id == run_id)).mappings().all()
        return [dict(r) for r in rows]

    def metrics_of(self, run_id: str, model: str, cell: str) -> dict[str, Metric]:
        with self.engine.connect() as c:
            rows = c.execute(
                select(metrics).where(
                    metrics.c.run_id == run_id, metrics.c.model == model, metrics.c.cell == cell
                )
            ).mappings()
            return {
                r["name"]: Metric(r["name"], r["value"], r["se"], r["better"], r["kind"])
                for r in rows
            }

    def previous_ok(self, run_id: str, model: str, cell: str) -> str | None:
        """The latest other run, started before this one, in which this cell succeeded."""
        with self.engine.connect() as c:
            started = c.execute(select(runs.c.started).where(runs.c.id == run_id)).scalar_one()
            row = c.execute(
                select(runs.c.id)
                .join(cells, cells.c.run_id == runs.c.id)
                .where(
                    runs.c.id != run_id,
                    runs.c.started <= started,
                    cells.c.model == model,
                    cells.c.cell == cell,
                    cells.c.status == "ok",
                )
                .order_by(runs.c.started.desc(), runs.c.id.desc())
                .limit(1)
            ).first()
        return row.id if row else None

    def baseline(self, name: str = "default") -> str | None:
        with self.engine.connect() as c:
            return c.execute(
                select(baselines.c.run_id).where(baselines.c.name == name)
            ).scalar_one_or_none()

    def run_ids(self) -> list[dict]:
        """Every run, oldest first: {id, started, ended}."""
        with self.engine.connect() as c:
            rows = c.execute(
                select(runs.c.id, runs.c.started, runs.c.ended, runs.c.git).order_by(
                    runs.c.started, runs.c.id
                )
            ).mappings()
            return [dict(r) for r in rows]

    def history(self) -> list[dict]:
        """Every metric row joined with its run's start time, oldest first."""
        with self.engine.connect() as c:
            rows = c.execute(
                select(metrics, runs.c.started)
                .join(runs, runs.c.id == metrics.c.run_id)
                .order_by(runs.c.started, runs.c.id)
            ).mappings()
            return [dict(r) for r in rows]


def _connect_args(url: str) -> dict:
    return {"timeout": 60} if url.startswith("sqlite") else {}


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
    cur.execute("PRAGMA busy_timeout=60000")  # a second writer waits up to 60 s
    cur.close()
