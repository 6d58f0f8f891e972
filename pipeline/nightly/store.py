"""The results database of nightly runs: SQLite by default, PostgreSQL (or any SQLAlchemy URL)
for a team. The schema is upgraded in place when a store opens (schema.py, Alembic).

    runs          one row per nightly run: id, times, git commit, library versions, host,
                  matrix, the driver holding it (owner), its lease (heartbeat, expires) and the
                  lease's generation (lease: one more at every takeover, the fencing token)
    current_runs  the one unfinished run of each matrix
    claims        the cells a driver is running now, each with its own lease (expires)
    cells         one row per (run, model, cell): status, error, the recipe overrides' hash,
                  the node and GPUs it ran on
    metrics       one row per (run, model, cell, metric): value (NaN and ±inf kept), SE,
                  which way is better
    baselines     pinned runs to compare against (name → run id)

Two drivers on one matrix: the first to insert the matrix's current run holds it; a second
joins it and takes only cells nobody has claimed (a claim whose lease lapsed is free again: its
driver died; on the same host, a driver whose process is gone is dead at once). A run is one
commit and one set of library versions: a night whose facts differ does not resume or join it
(`changed`). Leases are judged on the database's clock (CURRENT_TIMESTAMP), never a driver's.

Fencing: a driver's writes name what it holds — the run's lease generation for its holder, its
claim for a cell — and once another driver took either, they are refused (LeaseLost): the driver
stops its cells and says so. A real result (anything but `failed`) it finished before it
learned is still kept where the cell has no result or only a failed one, so a `failed` never
masks a real result; its own `failed` is not recorded, the new holder runs that cell. A cell is
otherwise recorded once: a second write of it is a no-op. Each cell is written in one
transaction; SQLite runs in WAL mode with a busy timeout, so a second writer waits instead of
failing with "database is locked".

A SQLite file this host may not write is still read (a report needs no more): it is opened
`mode=ro`, and `immutable` where its folder is not writable and no writer's -shm is beside
it (_readable); a night or a pin on it is one line, exit 4.

Every call to the database is bounded (Limits): connect and statement timeouts, TCP keepalives,
a deadline past which a PostgreSQL connection is cut, and a few tries with backoff on a lost
connection (a restarted server). What the store prints or raises never shows the URL's
password (pipeline.core.secrets).
"""

import contextlib
import datetime as dt
import math
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from secrets import token_hex
from typing import TypeVar
from urllib.parse import quote

from sqlalchemy import (
    JSON,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    event,
    exc,
    insert,
    make_url,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement
from sqlalchemy.types import TypeDecorator

from pipeline.core import secrets
from pipeline.core.errors import NotOnThisHost, PipelineError, UserError, first_line
from pipeline.nightly import schema

T = TypeVar("T")

# Leases and every wait on the database, in one place.
LEASE_S = 120  # a driver or a claim silent this long is taken for dead (database clock)
HEARTBEAT_S = 30  # how often a running driver renews its leases


@dataclass(frozen=True)
class Limits:
    """How long the store waits for its database, and how often it tries again. The bound that
    matters: a heartbeat that gives up (worst_s) does so before its lease lapses —
    HEARTBEAT_S + worst_s < LEASE_S — so a driver cut off from the database has stopped its
    cells before another driver may take them."""

    connect_s: int = 5  # psycopg connect_timeout: a server that accepts TCP and never answers
    statement_s: float = 10  # PostgreSQL statement_timeout: a statement stuck behind a lock
    keepalive_idle_s: int = 30  # TCP keepalives: a peer gone without a reset is seen in
    keepalive_interval_s: int = 10  # idle + interval × count s, and a firewall keeps
    keepalive_count: int = 3  # an idle pooled connection open
    busy_s: float = 20  # SQLite busy timeout: a second writer waits this long for the lock
    attempts: int = 3  # tries of each store call on a lost connection or a timeout
    backoff_s: tuple[float, ...] = (2.0, 8.0)  # the waits between them (a restart takes ~2 s)
    margin_s: float = 5  # a try's time beyond connecting and one statement (a few more)

    @property
    def attempt_s(self) -> float:
        """The longest one try may take: past it a PostgreSQL connection is cut by the store
        (a stopped server's kernel still answers keepalives, and statement_timeout is the
        server's own), and SQLite has given up waiting for its lock."""
        return max(self.connect_s + self.statement_s + self.margin_s, self.busy_s)

    @property
    def worst_s(self) -> float:
        """How long a store call may take before it fails: every try, and the waits between."""
        waits = [self.backoff_s[min(i, len(self.backoff_s) - 1)] for i in range(self.attempts - 1)]
        return self.attempts * self.attempt_s + sum(waits)


LIMITS = Limits()  # HEARTBEAT_S + LIMITS.worst_s < LEASE_S: tested


class Number(TypeDecorator):
    """A float column that keeps NaN and ±inf on every backend. PostgreSQL's double precision
    holds all three and SQLite's REAL holds ±inf, but SQLite has no NaN: it stores one as NULL
    (and a NOT NULL column refuses the row). There a NaN is the text 'NaN' in the REAL column —
    SQLite keeps text that is not a number as text, so `typeof(value)` says what it is — read
    back as float('nan')."""

    impl = Float
    cache_ok = True

    def bind_processor(self, dialect):
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value):  # instead of Float's, which would make the text a float again
            if value is None:
                return None
            return "NaN" if math.isnan(value) else float(value)

        return process

    def process_result_value(self, value, dialect):
        return None if value is None else float(value)


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
    # its lease, on the database's clock (seconds since the epoch): renewed while it runs
    Column("heartbeat", Float),  # the last renewal
    Column("expires", Float),  # null or past: lapsed, the run is free
    Column("lease", Integer, nullable=False, server_default="0"),  # +1 at every takeover
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
    Column("expires", Float, nullable=False, server_default="0"),  # database clock
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
    Column("value", Number, nullable=False),
    Column("se", Number),  # standard error, where the metric has one
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


class LeaseLost(PipelineError):
    """Another driver took this driver's run or one of its cells (its lease had lapsed): this
    driver's writes are refused from now on, and it stops."""


class StoreError(PipelineError):
    """The database did not answer within the store's tries (Limits)."""

    reason = "server_error"


class _db_now(FunctionElement):
    """Seconds since the epoch on the database's clock: CURRENT_TIMESTAMP (SQLite: 'now', the
    same clock to the millisecond; its CURRENT_TIMESTAMP has whole seconds only)."""

    type = Float()
    inherit_cache = True


@compiles(_db_now)
def _db_now_sql(element, compiler, **kw) -> str:
    return "CAST(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) AS DOUBLE PRECISION)"


@compiles(_db_now, "sqlite")
def _db_now_sqlite(element, compiler, **kw) -> str:
    return "((julianday('now') - 2440587.5) * 86400.0)"


def now(offset_s: float = 0) -> str:
    """This host's time, for the record (started, finished): never to judge a lease by."""
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_s)
    return moment.isoformat(timespec="seconds")


@dataclass(frozen=True)
class Held:
    """A run as a driver got it: its own (new, or resumed from a dead driver), or joined while
    another driver holds it."""

    run_id: str
    owner: str
    resumed: bool
    lease: int | None = None  # the run's lease generation this driver holds (None: joined)
    holder: str | None = None  # the other driver, when joined
    holder_seen_s: float | None = None  # since its last heartbeat
    replaced: str | None = None  # the interrupted run this new one was started instead of
    why: str | None = None  # what changed since that one started

    @property
    def joined(self) -> bool:
        return self.holder is not None


SOURCE = "NIGHTLY_DB or --db"


class Store:
    """`url`: any SQLAlchemy URL; `source`: where it came from, named in every error."""

    def __init__(
        self, url: str, lease_s: float = LEASE_S, limits: Limits = LIMITS, source: str = SOURCE
    ):
        secrets.remember(url)
        self.url = secrets.url(url)  # as it may be shown: never with its password
        self.source = source
        self.lease_s = lease_s
        self.limits = limits
        self._mine: set[tuple[str, str, str, str]] = set()  # claims held: (run, owner, model, cell)
        self._connections: weakref.WeakSet = weakref.WeakSet()  # PostgreSQL's, for _cut
        self._connections_lock = threading.Lock()  # added by the pool, read by _cut's timer
        self.engine = self._engine(self._parse(url))
        self._refusal = self._open()  # None, or why this store may not be written

    # opening
    def _parse(self, url: str) -> URL:
        """The URL, or one line saying what is wrong with it (never its password)."""
        where = f"{self.source}: {self.url}"
        authority = url.partition("//")[2].partition("/")[0]
        if authority.count("@") > 1:
            raise UserError(f"{where}: its password holds an unescaped @ (write it as %40)")
        if url != url.strip():
            raise UserError(f"{where} is not a database URL: it starts or ends with a space")
        try:
            return make_url(_pinned_driver(url))
        except ValueError as e:
            why = "its port is not a number" if "int()" in str(e) else secrets.text(first_line(e))
            raise UserError(f"{where} is not a database URL: {why}") from None
        except exc.ArgumentError:
            raise UserError(
                f"{where} is not a database URL (e.g. postgresql://HOST:5432/nightly with its "
                "user and password before the host, or sqlite:///runs/nightly.db)"
            ) from None

    def _engine(self, url: URL):
        sqlite = url.get_backend_name() == "sqlite"
        try:
            if sqlite and url.database not in (None, ":memory:") and "uri" not in url.query:
                Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
                url = _readable(url)
            engine = create_engine(url, pool_pre_ping=True, connect_args=self._connect_args(url))
        except OSError as e:
            raise NotOnThisHost(f"{self._where()}: {secrets.text(first_line(e))}") from None
        except (ImportError, exc.ArgumentError) as e:  # a dialect or driver not installed
            raise UserError(f"{self._where()}: {secrets.text(first_line(e))}") from None
        if sqlite:
            event.listen(engine, "connect", self._sqlite_pragmas)
        elif engine.dialect.name == "postgresql":
            event.listen(engine, "connect", self._remember_connection)
        return engine

    def _remember_connection(self, dbapi_connection, _record) -> None:
        with self._connections_lock:
            self._connections.add(dbapi_connection)

    def _connect_args(self, url: URL) -> dict:
        """Limits as the driver takes them; a setting the URL names itself is left to it."""
        lim = self.limits
        if url.get_backend_name() == "sqlite":
            return {"timeout": lim.busy_s}
        if url.get_backend_name() != "postgresql":
            return {}
        given = dict(url.query)
        args = {
            "connect_timeout": lim.connect_s,
            "keepalives": 1,
            "keepalives_idle": lim.keepalive_idle_s,
            "keepalives_interval": lim.keepalive_interval_s,
            "keepalives_count": lim.keepalive_count,
            "tcp_user_timeout": int(lim.attempt_s * 1000),  # data unacknowledged this long
        }
        args = {k: v for k, v in args.items() if k not in given}
        options = str(given.get("options", ""))
        if "statement_timeout" not in options:
            args["options"] = f"{options} -c statement_timeout={int(lim.statement_s * 1000)}"
        return args

    def _sqlite_pragmas(self, dbapi_connection, _record) -> None:
        cur = dbapi_connection.cursor()
        with contextlib.suppress(sqlite3.OperationalError):  # read-only: keeps its journal
            cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cur.execute(f"PRAGMA busy_timeout={int(self.limits.busy_s * 1000)}")  # a writer waits
        cur.close()

    def _open(self) -> PipelineError | None:
        """The schema brought to HEAD, checked before anything is written: one line where it
        cannot be (a newer schema, no privileges, a file this host cannot write). Returns why
        this store may not be written where it may still be read (a report needs no more)."""
        try:
            with self._deadline():
                schema.upgrade(self.engine)
        except schema.Newer as e:
            raise UserError(
                f"{self._where()} is at schema revision {e.revision}, newer than this checkout "
                f"knows ({schema.HEAD}): update the checkout, or point {self.source} at another "
                "database"
            ) from None
        except OSError as e:  # the migration's lock file beside a SQLite database
            raise NotOnThisHost(f"{self._where()}: {secrets.text(first_line(e))}") from None
        except exc.DBAPIError as e:
            raise (self._refused(e) or UserError(f"{self._where()}: {_said(e)}")) from None
        try:
            with self._deadline(), self.engine.begin() as c:  # a write that changes nothing
                c.execute(text("UPDATE alembic_version SET version_num = version_num"))
        except exc.DBAPIError as e:
            refusal = self._refused(e)
            if refusal is None:
                raise UserError(f"{self._where()}: {_said(e)}") from None
            return refusal
        return None

    def _where(self) -> str:
        return f"results database {self.url} ({self.source})"

    def _refused(self, e: exc.DBAPIError) -> PipelineError | None:
        """A database this user or host may not write: the one line that says so, else None."""
        if getattr(e.orig, "sqlstate", None) == "42501":  # PostgreSQL: insufficient privilege
            user = self.engine.url.username or "this user"
            return UserError(
                f"{self._where()}: user {user} may not create or write the store's tables "
                f"({_said(e)}): grant it CREATE on the schema and write on its tables, or point "
                f"{self.source} at a database it owns"
            )
        if _read_only(e):
            return NotOnThisHost(
                f"{self._where()}: this host cannot use it ({_said(e)}): SQLite writes the file "
                f"and beside it; make both writable, or point {self.source} at a writable place"
            )
        return None

    def require_writable(self) -> None:
        """One line, before a night starts, where this store may be read but not written."""
        if self._refusal is not None:
            raise self._refusal

    # resilience
    def _retried(self, what: str, work: Callable[[], T]) -> T:
        """`work` (idempotent: one transaction, safe to redo) tried up to Limits.attempts times
        on a lost connection or a timeout; then one line (StoreError)."""
        tries = self.limits.attempts
        for attempt in range(tries):
            try:
                with self._deadline():
                    return work()
            except exc.DBAPIError as e:
                if (refusal := self._refused(e)) is not None:
                    raise refusal from None
                if not _transient(e):
                    raise
                last = e
            if attempt + 1 < tries:
                time.sleep(self.limits.backoff_s[min(attempt, len(self.limits.backoff_s) - 1)])
        raise StoreError(
            f"results database {self.url}: {what} failed {tries} times: {_said(last)}"
        ) from None

    @contextlib.contextmanager
    def _deadline(self) -> Iterator[None]:
        """PostgreSQL: past Limits.attempt_s every connection to the server is cut, so a call
        waiting on one fails instead of hanging (a stopped server, a host gone without a reset)."""
        if self.engine.dialect.name != "postgresql":
            yield
            return
        timer = threading.Timer(self.limits.attempt_s, self._cut)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _cut(self) -> None:
        """The server has not answered within a try's time: shut every connection's socket
        (what waits on one returns with an error; the pool's pre-ping replaces them)."""
        with self._connections_lock:
            connections = list(self._connections)
        for dbapi in connections:
            with contextlib.suppress(Exception):
                sock = socket.socket(fileno=os.dup(dbapi.fileno()))
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                finally:
                    sock.close()

    # writes
    def hold(
        self, matrix_sha: str, facts: dict, executor: str, owner: str, new: bool = False
    ) -> Held:
        """The run this driver works on: the matrix's unfinished run (joined while its driver's
        lease holds, else taken over), or a new one (`new`: always; and where the unfinished
        run's facts differ from these: its cells and these may not share a run)."""
        self.require_writable()
        return self._retried(
            "starting a run", lambda: self._hold(matrix_sha, facts, executor, owner, new)
        )

    def _hold(self, matrix_sha: str, facts: dict, executor: str, owner: str, new: bool) -> Held:
        for _ in range(5):  # a race lost to another driver: look again
            why = None
            with self.engine.begin() as c:
                current = self._current(c, matrix_sha)
                if current and not new:
                    run = c.execute(select(runs).where(runs.c.id == current)).mappings().one()
                    why = changed(run, facts, executor)
                    found = self._resume(c, run, owner, why)
                    if found is not None:
                        return found
                    if not why:
                        continue  # another driver took it over first
            held = self._start(matrix_sha, facts, executor, owner, current)
            if held is not None:
                return replace(held, replaced=current, why=why) if why else held
        raise RuntimeError(f"could not start or join a run of matrix {matrix_sha[:12]}")

    def _resume(self, c: Connection, run, owner: str, why: str | None) -> Held | None:
        """Join the run while its holder lives, else take it over (None: not this one)."""
        if run["owner"] == owner:  # a retried hold of this driver's
            return Held(run["id"], owner, resumed=True, lease=run["lease"])
        moment = self._now(c)
        if not self._gone(moment, run["owner"], run["expires"]):
            if why:
                raise UserError(
                    f"nightly run {run['id']} of this matrix is running under {run['owner']}, "
                    f"and this checkout differs ({why}): one run is one commit and one set of "
                    "library versions; wait for it to end, or stop that driver"
                )
            seen = moment - run["heartbeat"] if run["heartbeat"] is not None else None
            return Held(run["id"], owner, resumed=True, holder=run["owner"], holder_seen_s=seen)
        if why:
            return None  # not resumed: a new run instead
        lease = run["lease"] + 1
        taken = c.execute(
            update(runs)
            .where(runs.c.id == run["id"], runs.c.lease == run["lease"])  # nobody took it first
            .values(owner=owner, lease=lease, heartbeat=_db_now(), expires=self._expiry())
        )
        return Held(run["id"], owner, resumed=True, lease=lease) if taken.rowcount == 1 else None

    def _start(
        self, matrix_sha: str, facts: dict, executor: str, owner: str, current: str | None
    ) -> Held | None:
        """A new run as the matrix's current one (None: another driver's won the race)."""
        run_id = new_run_id()
        try:
            with self.engine.begin() as c:
                self._insert_run(c, run_id, matrix_sha, facts, executor, owner)
                if current is None:
                    c.execute(insert(current_runs).values(matrix_sha=matrix_sha, run_id=run_id))
                else:
                    moved = c.execute(
                        update(current_runs)
                        .where(
                            current_runs.c.matrix_sha == matrix_sha,
                            current_runs.c.run_id == current,
                        )
                        .values(run_id=run_id)
                    )
                    if moved.rowcount != 1:
                        raise _Raced
        except _Raced:
            return None
        except exc.IntegrityError:
            with self.engine.connect() as c:  # check, then decide: lost a race, or a real error
                if self._current(c, matrix_sha) is None:
                    raise
            return None
        return Held(run_id, owner, resumed=False, lease=1)

    def start_run(self, run_id: str, matrix_sha: str, facts: dict, executor: str) -> None:
        """A run outside any matrix's current run (tests, imports)."""
        self.require_writable()

        def work() -> None:
            with self.engine.begin() as c:
                self._insert_run(c, run_id, matrix_sha, facts, executor, None)

        self._retried(f"starting run {run_id}", work)

    def _insert_run(self, c, run_id, matrix_sha, facts, executor, owner) -> None:
        """facts: {"git", "libraries", "host"} of the machine that drives the run."""
        lease = {"heartbeat": _db_now(), "expires": self._expiry(), "lease": 1} if owner else {}
        c.execute(
            insert(runs).values(
                id=run_id, started=now(), matrix_sha=matrix_sha, executor=executor, owner=owner,
                **lease, **facts,
            )
        )  # fmt: skip

    def heartbeat(self, held: Held) -> None:
        """Renew this driver's leases: on the run, if it holds it, and on its claims. LeaseLost
        where another driver took either."""
        self._retried("renewing this driver's leases", lambda: self._beat(held))

    def _beat(self, held: Held) -> None:
        with self.engine.begin() as c:
            if held.lease is not None:
                renewed = c.execute(
                    update(runs)
                    .where(runs.c.id == held.run_id, runs.c.lease == held.lease)
                    .values(heartbeat=_db_now(), expires=self._expiry())
                )
                if renewed.rowcount == 0:
                    raise LeaseLost(self._taken_run(c, held))
            c.execute(
                update(claims)
                .where(claims.c.run_id == held.run_id, claims.c.owner == held.owner)
                .values(expires=self._expiry())
            )
            mine = {(m, x) for r, o, m, x in set(self._mine) if (r, o) == (held.run_id, held.owner)}
            others = c.execute(
                select(claims.c.model, claims.c.cell, claims.c.owner).where(
                    claims.c.run_id == held.run_id, claims.c.owner != held.owner
                )
            )
            for model, cell, owner in others:
                if (model, cell) in mine:
                    raise LeaseLost(
                        f"nightly run {held.run_id}: {model} × {cell} was taken over by {owner} "
                        "(this driver's lease on it had lapsed): this driver stops"
                    )

    def claim(self, held: Held, model: str, cell: str) -> bool:
        """Whether this driver may run the cell: not recorded, and unclaimed, its claim lapsed,
        or claimed by this driver already. LeaseLost where another driver took this one's run."""
        self.require_writable()
        key = {"run_id": held.run_id, "model": model, "cell": cell}
        got = self._retried(f"claiming {model} × {cell}", lambda: self._claim(held, key))
        if got:
            self._mine.add((held.run_id, held.owner, model, cell))
        return got

    def _claim(self, held: Held, key: dict) -> bool:
        for _ in range(5):  # a claim released between our insert and our look: again
            try:
                with self.engine.begin() as c:
                    self._fence_run(c, held)
                    c.execute(
                        insert(claims).values(**key, owner=held.owner, expires=self._expiry())
                    )
                    # checked after the insert: a claim deleted as its cell was recorded lets the
                    # insert through, and only now is that record visible
                    if self._recorded(c, key):
                        c.execute(delete(claims).where(*_match(claims, key)))
                        return False
                    return True
            except exc.IntegrityError:  # check, then decide: claimed, or a real error
                pass
            with self.engine.begin() as c:
                self._fence_run(c, held)
                taken = self._take_claim(c, held, key)
                if taken is not None:
                    return taken
                if not self._recorded(c, key):
                    continue  # nobody's claim, nobody's record: released meanwhile
                return False
        raise RuntimeError(f"could not claim {key['model']} × {key['cell']}")

    def _take_claim(self, c: Connection, held: Held, key: dict) -> bool | None:
        """The cell's claim: this driver's, or taken from a driver that is gone (None: there is
        no claim)."""
        match = _match(claims, key)
        found = c.execute(select(claims.c.owner, claims.c.expires).where(*match)).first()
        if found is None:
            return None
        if found.owner == held.owner:  # a retried claim of this driver's
            return not self._recorded(c, key)
        if not self._gone(self._now(c), found.owner, found.expires):
            return False
        taken = c.execute(
            update(claims)
            .where(*match, claims.c.owner == found.owner, claims.c.expires == found.expires)
            .values(owner=held.owner, expires=self._expiry())
        )
        return taken.rowcount == 1 and not self._recorded(c, key)

    def release(self, held: Held) -> None:
        """This driver stops: its claims are free at once, and its run's lease if it still
        holds it (the next driver resumes without waiting for the lapse). One try: where the
        database does not answer, they lapse."""
        for r, o, m, x in set(self._mine):
            if (r, o) == (held.run_id, held.owner):
                self._mine.discard((r, o, m, x))
        with contextlib.suppress(exc.DBAPIError), self._deadline(), self.engine.begin() as c:
            c.execute(
                delete(claims).where(claims.c.run_id == held.run_id, claims.c.owner == held.owner)
            )
            if held.lease is not None:
                c.execute(
                    update(runs)
                    .where(runs.c.id == held.run_id, runs.c.lease == held.lease)
                    .values(expires=None)
                )

    def _gone(self, moment: float, owner: str | None, expires: float | None) -> bool:
        """A driver is gone when its lease lapsed (on the database's clock: `moment`), or at
        once when it ran on this host and its process is no more (a killed `make nightly`
        resumed by the next)."""
        if not owner or expires is None or expires < moment:
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
        self.require_writable()

        def work() -> None:
            with self.engine.begin() as c:
                c.execute(update(runs).where(runs.c.id == run_id).values(ended=now()))
                c.execute(delete(current_runs).where(current_runs.c.run_id == run_id))
                c.execute(delete(claims).where(claims.c.run_id == run_id))

        self._retried(f"ending run {run_id}", work)

    def record_cell(self, run_id: str, result: dict, held: Held | None = None) -> bool:
        """A cell's status and all its metrics, in one transaction (all or nothing). Once: a
        cell already recorded is left as it is (False), except that a real result replaces a
        `failed` one. `held`: the driver's lease; where another driver took it, a real result
        is still kept (as above), a failed one is not recorded, and LeaseLost says so."""
        self.require_writable()
        key = {"run_id": run_id, "model": result["model"], "cell": result["cell"]}
        if held is not None:  # no longer this driver's to renew, whatever happens below
            self._mine.discard((run_id, held.owner, key["model"], key["cell"]))
        what = f"recording {key['model']} × {key['cell']}"
        written, lost = self._retried(what, lambda: self._record(key, result, held))
        if lost:
            kept = "its result was kept" if written else "that driver runs the cell"
            raise LeaseLost(f"{lost}: this driver stops ({kept})")
        return written

    def _record(self, key: dict, result: dict, held: Held | None) -> tuple[bool, str | None]:
        """(written, why this driver lost its lease or None)."""
        real = result["status"] != "failed"
        try:
            with self.engine.begin() as c:
                lost = self._fenced(c, held, key) if held is not None else None
                status = c.execute(select(cells.c.status).where(*_match(cells, key))).scalar()
                write = (status is None and (real or not lost)) or (status == "failed" and real)
                if write:
                    if status is not None:  # a failed one, replaced by a real result
                        c.execute(delete(metrics).where(*_match(metrics, key)))
                        c.execute(delete(cells).where(*_match(cells, key)))
                    self._insert_cell(c, key, result)
                mine = [claims.c.owner == held.owner] if held is not None else []
                c.execute(delete(claims).where(*_match(claims, key), *mine))
            return write, lost
        except exc.IntegrityError:
            with self.engine.connect() as c:  # check, then decide: another driver's record?
                if not self._recorded(c, key):
                    raise
            return False, None

    def _insert_cell(self, c: Connection, key: dict, result: dict) -> None:
        where = result.get("where") or {}
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

    def _fenced(self, c: Connection, held: Held, key: dict) -> str | None:
        """Why this driver may no longer write this cell (its run or its claim taken), or None."""
        if held.lease is not None:
            lease = c.execute(select(runs.c.lease).where(runs.c.id == held.run_id)).scalar()
            if lease != held.lease:
                return self._taken_run(c, held)
        owner = c.execute(select(claims.c.owner).where(*_match(claims, key))).scalar()
        if owner is not None and owner != held.owner:
            return (
                f"nightly run {held.run_id}: {key['model']} × {key['cell']} was taken over by "
                f"{owner} (this driver's lease on it had lapsed)"
            )
        return None

    def _fence_run(self, c: Connection, held: Held) -> None:
        if held.lease is not None:
            lease = c.execute(select(runs.c.lease).where(runs.c.id == held.run_id)).scalar()
            if lease != held.lease:
                raise LeaseLost(self._taken_run(c, held) + ": this driver stops")

    def _taken_run(self, c: Connection, held: Held) -> str:
        run = c.execute(select(runs.c.owner, runs.c.lease).where(runs.c.id == held.run_id)).first()
        who = f"{run.owner} (lease {held.lease} → {run.lease})" if run else "nobody (deleted)"
        return f"nightly run {held.run_id} was taken over by {who}: this driver's lease had lapsed"

    @staticmethod
    def _recorded(c, key: dict) -> bool:
        found = select(cells.c.status).where(*_match(cells, key))
        return c.execute(found).first() is not None

    @staticmethod
    def _current(c, matrix_sha: str) -> str | None:
        return c.execute(
            select(current_runs.c.run_id).where(current_runs.c.matrix_sha == matrix_sha)
        ).scalar_one_or_none()

    @staticmethod
    def _now(c) -> float:
        return c.execute(select(_db_now())).scalar_one()

    def _expiry(self):
        return _db_now() + self.lease_s

    def pin(self, run_id: str, name: str = "default") -> None:
        self.require_writable()

        def work() -> None:
            with self.engine.begin() as c:
                if c.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
                    raise UserError(f"no nightly run '{run_id}' in {self.url}")
                c.execute(delete(baselines).where(baselines.c.name == name))
                c.execute(insert(baselines).values(name=name, run_id=run_id, pinned=now()))

        self._retried(f"pinning {run_id}", work)

    # reads
    def _read(self, what: str, query: Callable[[Connection], T]) -> T:
        def work() -> T:
            with self.engine.connect() as c:
                return query(c)

        return self._retried(what, work)

    def unfinished_run(self, matrix_sha: str) -> str | None:
        """The matrix's current run, never ended (interrupted, or running): resumed, not redone."""
        return self._read("reading runs", lambda c: self._current(c, matrix_sha))

    def cells_of(self, run_id: str) -> list[dict]:
        def query(c) -> list[dict]:
            rows = c.execute(select(cells).where(cells.c.run_id == run_id)).mappings().all()
            return [dict(r) for r in rows]

        return self._read("reading cells", query)

    def metrics_of(self, run_id: str, model: str, cell: str) -> dict[str, Metric]:
        def query(c) -> dict[str, Metric]:
            rows = c.execute(
                select(metrics).where(
                    metrics.c.run_id == run_id, metrics.c.model == model, metrics.c.cell == cell
                )
            ).mappings()
            return {
                r["name"]: Metric(r["name"], r["value"], r["se"], r["better"], r["kind"])
                for r in rows
            }

        return self._read("reading metrics", query)

    def previous_ok(self, run_id: str, model: str, cell: str) -> str | None:
        """The latest other run, started before this one, in which this cell succeeded."""

        def query(c) -> str | None:
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

        return self._read("reading runs", query)

    def baseline(self, name: str = "default") -> str | None:
        return self._read(
            "reading baselines",
            lambda c: c.execute(
                select(baselines.c.run_id).where(baselines.c.name == name)
            ).scalar_one_or_none(),
        )

    def run_ids(self) -> list[dict]:
        """Every run, oldest first: {id, started, ended, git, matrix_sha}."""

        def query(c) -> list[dict]:
            rows = c.execute(
                select(
                    runs.c.id, runs.c.started, runs.c.ended, runs.c.git, runs.c.matrix_sha
                ).order_by(runs.c.started, runs.c.id)
            ).mappings()
            return [dict(r) for r in rows]

        return self._read("reading runs", query)

    def history(self) -> list[dict]:
        """Every metric row joined with its run's start time, oldest first."""

        def query(c) -> list[dict]:
            rows = c.execute(
                select(metrics, runs.c.started)
                .join(runs, runs.c.id == metrics.c.run_id)
                .order_by(runs.c.started, runs.c.id)
            ).mappings()
            return [dict(r) for r in rows]

        return self._read("reading metrics", query)


class _Raced(Exception):
    """Another driver moved the matrix's current run first: roll back, look again."""


def changed(run, facts: dict, executor: str) -> str | None:
    """Why a night with these facts may not continue `run` (None: it may). A run is one commit,
    one set of library versions and one executor — and where cells run on the driver's own host
    (local), its GPUs: a run resumed after `git pull` would otherwise credit the new code's
    results to the old commit, or the old code's to the new one. So such a night does not
    resume the run (it starts its own) nor join it."""
    old, new = run["git"] or {}, facts.get("git") or {}
    if (old.get("commit"), old.get("dirty")) != (new.get("commit"), new.get("dirty")):
        return f"commit {_commit(old)} → {_commit(new)}"
    before, after = run["libraries"] or {}, facts.get("libraries") or {}
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            return f"{name} {before.get(name)} → {after.get(name)}"
    if (run["executor"] or executor) != executor:
        return f"executor {run['executor']} → {executor}"
    gpus = ((run["host"] or {}).get("gpus"), (facts.get("host") or {}).get("gpus"))
    if executor == "local" and gpus[0] != gpus[1]:
        return f"GPUs {gpus[0] or 'none'} → {gpus[1] or 'none'}"
    return None


def _commit(git: dict) -> str:
    commit = (git.get("commit") or "unknown")[:12]
    return commit + (" (with local changes)" if git.get("dirty") else "")


def _match(table: Table, key: dict) -> list:
    return [table.c[k] == v for k, v in key.items()]


def _said(e: BaseException) -> str:
    """A driver's error as one line, its passwords masked."""
    return secrets.text(first_line(getattr(e, "orig", None) or e))


def _transient(e: exc.DBAPIError) -> bool:
    """A lost connection, a timeout, a busy SQLite: worth another try."""
    return e.connection_invalidated or isinstance(e, exc.OperationalError | exc.InterfaceError)


def _read_only(e: exc.DBAPIError) -> bool:
    """SQLite could not write the file (read-only file, folder or mount)."""
    name = getattr(e.orig, "sqlite_errorname", "")
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"))


def _readable(url: URL) -> URL:
    """A SQLite file this host may not write, as a URL SQLite reads it by: `mode=ro`, and
    `immutable=1` where its folder is not writable and no `-shm` is beside it. In WAL mode a
    reader needs the -shm file, and SQLite cannot make one in such a folder: the file is then
    read as it is, trusted not to change meanwhile (https://www.sqlite.org/wal.html, "Read-Only
    Databases"). A -shm there is a writer's (who may write the folder): it is read through, and
    so is the night in its -wal. A file this host may write, a new one, is the writer's URL as
    given."""
    path = os.path.abspath(url.database or "")  # as pysqlite opens it
    folder = os.path.dirname(path)
    if not os.path.exists(path) or (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        return url
    query = {**url.query, "mode": "ro", "uri": "true"}
    if not os.access(folder, os.W_OK) and not os.path.exists(f"{path}-shm"):
        query["immutable"] = "1"
    return url.set(database=f"file:{quote(path)}", query=query)


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + token_hex(3)


def _pinned_driver(url: str) -> str:
    """postgresql://… (and Heroku's postgres://) means the driver we pin, psycopg 3: SQLAlchemy
    would pick psycopg2, which is not installed."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url.removeprefix(bare)
    return url
