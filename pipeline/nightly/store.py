"""The results database of nightly runs: SQLite by default, PostgreSQL (or any SQLAlchemy URL)
for a team. The schema is upgraded in place when a store opens (schema.py, Alembic).

    runs          one row per nightly run: id, times, git commit, library versions, host,
                  matrix, the driver holding it (owner) and its lease (heartbeat)
    current_runs  the one unfinished run of each matrix
    claims        the cells a driver is running now, each with its own heartbeat
    cells         one row per (run, model, cell): status, error, the recipe overrides' hash,
                  the node and GPUs it ran on
    metrics       one row per (run, model, cell, metric): value, SE, which way is better
    baselines     pinned runs to compare against (name → run id)

Two drivers on one matrix: the first to insert the matrix's current run holds it; a second
joins it and takes only cells nobody has claimed (a claim whose heartbeat is older than the
lease is free again: its driver died; on the same host, a driver whose process is gone is
dead at once). A cell is recorded once: a second write of it is a no-op. Each cell is written
in one transaction; SQLite runs in WAL mode with a busy timeout, so a second writer waits
instead of failing with "database is locked".
"""

import datetime as dt
import os
import secrets
import socket
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
    exc,
    insert,
    make_url,
    select,
    update,
)

from pipeline.core.errors import UserError
from pipeline.nightly import schema

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
    Column("owner", String(200)),  # the driver holding the run: host:pid:token
    Column("heartbeat", String(32)),  # its lease, renewed while it runs
)
current_runs = Table(
    "current_runs",
    meta,
    Column("matrix_sha", String(64), primary_key=True),
    Column("run_id", String(40), nullable=False),
)
claims = Table(
    "claims",
    meta,
    Column("run_id", String(40), primary_key=True),
    Column("model", String(200), primary_key=True),
    Column("cell", String(200), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("heartbeat", String(32), nullable=False),
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
    Column("node", String(200)),  # where it ran: host, or host/Ray node id
    Column("gpus", JSON),  # the GPUs it was given (CUDA_VISIBLE_DEVICES / Ray's ids)
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


LEASE_S = 120  # a driver or a claim silent this long is taken for dead
HEARTBEAT_S = 30  # how often a running driver renews its leases


def now(offset_s: float = 0) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_s)
    return moment.isoformat(timespec="seconds")


@dataclass(frozen=True)
class Held:
    """A run as a driver got it: its own (new, or resumed from a dead driver), or joined while
    another driver holds it."""

    run_id: str
    resumed: bool
    holder: str | None = None  # the other driver, when joined
    holder_seen_s: float | None = None  # since its last heartbeat

    @property
    def joined(self) -> bool:
        return self.holder is not None


class Store:
    def __init__(self, url: str, lease_s: float = LEASE_S):
        self.url = url
        self.lease_s = lease_s
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(
                parents=True, exist_ok=True
            )
        try:
            self.engine = create_engine(_pinned_driver(url), connect_args=_connect_args(url))
            if url.startswith("sqlite"):
                event.listen(self.engine, "connect", _sqlite_pragmas)
            schema.upgrade(self.engine)
        except (ImportError, exc.ArgumentError, exc.OperationalError) as e:
            # a bad URL, a driver not installed, a server not there: one line for the user
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"results database {_safe(url)}: {first}") from None

    # writes
    def hold(
        self, matrix_sha: str, facts: dict, executor: str, owner: str, new: bool = False
    ) -> Held:
        """The run this driver works on: the matrix's unfinished run (joined while its driver's
        lease holds, else taken over), or a new one (`new`: always)."""
        for _ in range(5):  # a race lost to another driver's insert: look again
            with self.engine.begin() as c:
                row = c.execute(
                    select(current_runs.c.run_id).where(current_runs.c.matrix_sha == matrix_sha)
                ).first()
                if row and not new:
                    return self._resume(c, row.run_id, owner)
            run_id = new_run_id()
            try:
                with self.engine.begin() as c:
                    self._insert_run(c, run_id, matrix_sha, facts, executor, owner)
                    if row:  # --new while one is unfinished: the new one is current
                        c.execute(
                            update(current_runs)
                            .where(current_runs.c.matrix_sha == matrix_sha)
                            .values(run_id=run_id)
                        )
                    else:
                        c.execute(insert(current_runs).values(matrix_sha=matrix_sha, run_id=run_id))
                return Held(run_id, resumed=False)
            except exc.IntegrityError:
                continue
        raise RuntimeError(f"could not start or join a run of matrix {matrix_sha[:12]}")

    def _resume(self, c, run_id: str, owner: str) -> Held:
        run = c.execute(select(runs.c.owner, runs.c.heartbeat).where(runs.c.id == run_id)).first()
        if run.owner != owner and not self._gone(run.owner, run.heartbeat):
            last = dt.datetime.fromisoformat(run.heartbeat)
            seen = (dt.datetime.now(dt.UTC) - last).total_seconds()
            return Held(run_id, resumed=True, holder=run.owner, holder_seen_s=seen)
        c.execute(update(runs).where(runs.c.id == run_id).values(owner=owner, heartbeat=now()))
        return Held(run_id, resumed=True)

    def start_run(self, run_id: str, matrix_sha: str, facts: dict, executor: str) -> None:
        """A run outside any matrix's current run (tests, imports)."""
        with self.engine.begin() as c:
            self._insert_run(c, run_id, matrix_sha, facts, executor, None)

    @staticmethod
    def _insert_run(c, run_id, matrix_sha, facts, executor, owner) -> None:
        """facts: {"git", "libraries", "host"} of the machine that drives the run."""
        stamp = now()
        c.execute(
            insert(runs).values(
                id=run_id, started=stamp, matrix_sha=matrix_sha, executor=executor,
                owner=owner, heartbeat=stamp if owner else None, **facts,
            )
        )  # fmt: skip

    def heartbeat(self, run_id: str, owner: str) -> None:
        """Renew this driver's leases: on the run, if it holds it, and on its claims."""
        stamp = now()
        with self.engine.begin() as c:
            mine = (runs.c.id == run_id, runs.c.owner == owner)
            c.execute(update(runs).where(*mine).values(heartbeat=stamp))
            c.execute(
                update(claims)
                .where(claims.c.run_id == run_id, claims.c.owner == owner)
                .values(heartbeat=stamp)
            )

    def claim(self, run_id: str, model: str, cell: str, owner: str) -> bool:
        """Whether this driver may run the cell: not recorded, and unclaimed or its claim stale."""
        key = {"run_id": run_id, "model": model, "cell": cell}
        match = [claims.c[k] == v for k, v in key.items()]
        try:
            with self.engine.begin() as c:
                c.execute(insert(claims).values(**key, owner=owner, heartbeat=now()))
                # checked after the insert: a claim deleted as its cell was recorded lets the
                # insert through, and only now is that record visible
                if self._recorded(c, key):
                    c.execute(claims.delete().where(*match))
                    return False
                return True
        except exc.IntegrityError:  # claimed: free only if its driver is gone
            pass
        with self.engine.begin() as c:
            held = c.execute(select(claims.c.owner, claims.c.heartbeat).where(*match)).first()
            if held is None or not self._gone(held.owner, held.heartbeat):
                return False
            taken = c.execute(
                update(claims)
                .where(*match, claims.c.owner == held.owner, claims.c.heartbeat == held.heartbeat)
                .values(owner=owner, heartbeat=now())
            )
            return taken.rowcount == 1 and not self._recorded(c, key)

    def _gone(self, owner: str | None, heartbeat: str | None) -> bool:
        """A driver is gone when its lease lapsed, or at once when it ran on this host and its
        process is no more (a killed `make nightly` resumed by the next)."""
        if not owner or not heartbeat or heartbeat < now(-self.lease_s):
            return True
        host, _, rest = owner.partition(":")
        pid = rest.partition(":")[0]
        if host != socket.gethostname() or not pid.isdigit():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # someone else's process: alive
            return False
        return False

    def end_run(self, run_id: str) -> None:
        with self.engine.begin() as c:
            c.execute(update(runs).where(runs.c.id == run_id).values(ended=now()))
            c.execute(current_runs.delete().where(current_runs.c.run_id == run_id))
            c.execute(claims.delete().where(claims.c.run_id == run_id))

    def record_cell(self, run_id: str, result: dict) -> bool:
        """A cell's status and all its metrics, in one transaction (all or nothing); once: a
        cell already recorded (another driver's, or a retry) is left as it is (False)."""
        key = {"run_id": run_id, "model": result["model"], "cell": result["cell"]}
        where = result.get("where") or {}
        try:
            with self.engine.begin() as c:
                if self._recorded(c, key):
                    return False
                c.execute(
                    insert(cells).values(
                        **key,
                        recipe=result["recipe"],
                        overrides_sha=result.get("overrides_sha"),
                        status=result["status"],
                        error=result.get("error"),
                        stages=result.get("stages"),
                        finished=now(),
                        node=where.get("node"),
                        gpus=where.get("gpus"),
                    )
                )
                rows = [{**key, **m} for m in result.get("metrics", [])]
                if rows:
                    c.execute(insert(metrics), rows)
                c.execute(claims.delete().where(*(claims.c[k] == v for k, v in key.items())))
            return True
        except exc.IntegrityError:  # recorded by another driver between the check and here
            return False

    @staticmethod
    def _recorded(c, key: dict) -> bool:
        found = select(cells.c.status).where(*(cells.c[k] == v for k, v in key.items()))
        return c.execute(found).first() is not None

    def pin(self, run_id: str, name: str = "default") -> None:
        with self.engine.begin() as c:
            if c.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
                raise UserError(f"no nightly run '{run_id}' in {self.url}")
            c.execute(baselines.delete().where(baselines.c.name == name))
            c.execute(insert(baselines).values(name=name, run_id=run_id, pinned=now()))

    # reads
    def unfinished_run(self, matrix_sha: str) -> str | None:
        """The matrix's current run, never ended (interrupted, or running): resumed, not redone."""
        with self.engine.connect() as c:
            return c.execute(
                select(current_runs.c.run_id).where(current_runs.c.matrix_sha == matrix_sha)
            ).scalar_one_or_none()

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


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def _safe(url: str) -> str:
    """The URL without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return repr(url)


def _pinned_driver(url: str) -> str:
    """postgresql://… (and Heroku's postgres://) means the driver we pin, psycopg 3: SQLAlchemy
    would pick psycopg2, which is not installed."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url.removeprefix(bare)
    return url


def _connect_args(url: str) -> dict:
    return {"timeout": 60} if url.startswith("sqlite") else {}


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
    cur.execute("PRAGMA busy_timeout=60000")  # a second writer waits up to 60 s
    cur.close()
