"""The store's database: its engine, opened with the schema brought to HEAD (schema.py,
Alembic), and every call to it bounded (Limits): connect and statement timeouts, TCP keepalives,
a deadline past which a PostgreSQL connection is cut, and a few tries with backoff on a lost
connection (a restarted server). What clears by itself is exit 75 (Transient), not a mistake:
a SQLite file another process holds locked past the busy timeout (opening, or after a call's
tries), and, while the store opens, a PostgreSQL that accepts the connection but does not answer
within connect_timeout or the deadline, or another session's lock held past statement_timeout.
A wrong host, port, password or database name stays exit 2. What the store prints or raises
never shows the URL's password (pipeline.core.secrets). A database closes its connections on
`close()`, else when it is collected.

SQLite runs in WAL mode with a busy timeout, so a second writer waits instead of failing with
"database is locked"."""

import contextlib
import functools
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from sqlalchemy import create_engine, event, exc, text
from sqlalchemy.engine import URL, Connection

from pipeline.core import secrets
from pipeline.core.errors import NotOnThisHost, PipelineError, Transient, UserError, first_line
from pipeline.nightly import schema
from pipeline.nightly.store.failures import (
    StoreError,
    busy_server,
    locked,
    read_only,
    said,
    transient,
)
from pipeline.nightly.store.limits import Limits
from pipeline.nightly.store.urls import parse, readable

T = TypeVar("T")

SOURCE = "NIGHTLY_DB or --db"


class Database:
    """`url`: any SQLAlchemy URL; `source`: where it came from, named in every error."""

    def __init__(self, url: str, limits: Limits, source: str = SOURCE):
        secrets.remember(url)
        self.url = secrets.url(url)  # as it may be shown: never with its password
        self.source = source
        self.limits = limits
        self._connections: weakref.WeakSet = weakref.WeakSet()  # PostgreSQL's, for _cut
        self._connections_lock = threading.Lock()  # added by the pool, read by _cut's timer
        self.engine = self._engine(parse(url, f"{self.source}: {self.url}"))
        # its pooled connections closed when the database goes, even unclosed (a failed open, a
        # test's): never left for the garbage collector to find open (psycopg's ResourceWarning)
        self._disposal = weakref.finalize(self, self.engine.dispose)
        self._refusal = self._open()  # None, or why this store may not be written

    def close(self) -> None:
        """Close its connections now; a later call opens new ones."""
        self._disposal()

    # opening
    def _engine(self, url: URL):
        sqlite = url.get_backend_name() == "sqlite"
        try:
            if sqlite and url.database not in (None, ":memory:") and "uri" not in url.query:
                Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
                url = readable(url)
            engine = create_engine(url, pool_pre_ping=True, connect_args=self._connect_args(url))
        except OSError as e:
            raise NotOnThisHost(f"{self.where()}: {secrets.text(first_line(e))}") from None
        except (ImportError, exc.ArgumentError) as e:  # a dialect or driver not installed
            raise UserError(f"{self.where()}: {secrets.text(first_line(e))}") from None
        # the listeners hold no reference to the database: a store its caller drops is freed at
        # once, and its finalizer closes the engine's connections
        if sqlite:
            event.listen(engine, "connect", functools.partial(_sqlite_pragmas, self.limits))
        elif engine.dialect.name == "postgresql":
            remember = functools.partial(_remember, self._connections, self._connections_lock)
            event.listen(engine, "connect", remember)
        return engine

    def _connect_args(self, url: URL) -> dict:
        """Limits as the driver takes them; a setting the URL names itself is left to it."""
        lim = self.limits
        if url.get_backend_name() == "sqlite":
            return {"timeout": lim.busy_s}
        if url.get_backend_name() != "postgresql":
            return {}
        given = dict(url.query)
        args: dict[str, int | str] = {
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

    def _open(self) -> PipelineError | None:
        """The schema brought to HEAD, checked before anything is written: one line where it
        cannot be (a newer schema, no privileges, a file this host cannot write). Returns why
        this store may not be written where it may still be read (a report needs no more)."""
        try:
            with self.deadline() as late:
                schema.upgrade(self.engine)
        except schema.Newer as e:
            raise UserError(
                f"{self.where()} is at schema revision {e.revision}, newer than this checkout "
                f"knows ({schema.HEAD}): update the checkout, or point {self.source} at another "
                "database"
            ) from None
        except OSError as e:  # the migration's lock file beside a SQLite database
            raise NotOnThisHost(f"{self.where()}: {secrets.text(first_line(e))}") from None
        except exc.DBAPIError as e:
            raise (self._refused(e) or self._not_opened(e, late.is_set())) from None
        try:
            with self.deadline() as late, self.engine.begin() as c:  # a write changing nothing
                c.execute(text("UPDATE alembic_version SET version_num = version_num"))
        except exc.DBAPIError as e:
            refusal = self._refused(e)
            if refusal is None:
                raise self._not_opened(e, late.is_set()) from None
            return refusal
        return None

    def _not_opened(self, e: exc.DBAPIError, late: bool) -> PipelineError:
        """Why the store did not open, `late` where its deadline cut the connection: busy for
        now (Transient: a lock another process holds, a server that did not answer in time),
        else the URL's mistake (a wrong host, port, password or database name)."""
        if late:
            return Transient(f"{self.where()}: no answer within {self.limits.attempt_s:g} s")
        if locked(e) or busy_server(e):
            return Transient(f"{self.where()}: {said(e)}")
        return UserError(f"{self.where()}: {said(e)}")

    def where(self) -> str:
        return f"results database {self.url} ({self.source})"

    def _refused(self, e: exc.DBAPIError) -> PipelineError | None:
        """A database this user or host may not write: the one line that says so, else None."""
        if getattr(e.orig, "sqlstate", None) == "42501":  # PostgreSQL: insufficient privilege
            user = self.engine.url.username or "this user"
            return UserError(
                f"{self.where()}: user {user} may not create or write the store's tables "
                f"({said(e)}): grant it CREATE on the schema and write on its tables, or point "
                f"{self.source} at a database it owns"
            )
        if read_only(e):
            return NotOnThisHost(
                f"{self.where()}: this host cannot use it ({said(e)}): SQLite writes the file "
                f"and beside it; make both writable, or point {self.source} at a writable place"
            )
        return None

    def require_writable(self) -> None:
        """One line, before a night starts, where this store may be read but not written."""
        if self._refusal is not None:
            raise self._refusal

    # resilience
    def retried(self, what: str, work: Callable[[], T]) -> T:
        """`work` (idempotent: one transaction, safe to redo) tried up to Limits.attempts times
        on a lost connection or a timeout; then one line: Transient where SQLite's lock was
        still held by another process, else StoreError."""
        tries = self.limits.attempts
        for attempt in range(tries):
            try:
                with self.deadline():
                    return work()
            except exc.DBAPIError as e:
                if (refusal := self._refused(e)) is not None:
                    raise refusal from None
                if not transient(e):
                    raise
                last = e
            if attempt + 1 < tries:
                time.sleep(self.limits.backoff_s[min(attempt, len(self.limits.backoff_s) - 1)])
        failed = f"results database {self.url}: {what} failed {tries} times: {said(last)}"
        raise (Transient(failed) if locked(last) else StoreError(failed)) from None

    def read(self, what: str, query: Callable[[Connection], T]) -> T:
        """`query` on a connection of its own, retried as every call is."""

        def work() -> T:
            with self.engine.connect() as c:
                return query(c)

        return self.retried(what, work)

    @contextlib.contextmanager
    def deadline(self) -> Iterator[threading.Event]:
        """PostgreSQL: past Limits.attempt_s every connection to the server is cut, so a call
        waiting on one fails instead of hanging (a stopped server, a host gone without a reset).
        Yields an event set once it has cut them (the failure then says so)."""
        passed = threading.Event()
        if self.engine.dialect.name != "postgresql":
            yield passed
            return
        timer = threading.Timer(self.limits.attempt_s, self._cut, args=(passed,))
        timer.daemon = True
        timer.start()
        try:
            yield passed
        finally:
            timer.cancel()

    def _cut(self, passed: threading.Event) -> None:
        """The server has not answered within a try's time: shut every connection's socket
        (what waits on one returns with an error; the pool's pre-ping replaces them)."""
        passed.set()
        with self._connections_lock:
            connections = list(self._connections)
        for dbapi in connections:
            with contextlib.suppress(Exception):
                sock = socket.socket(fileno=os.dup(dbapi.fileno()))
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                finally:
                    sock.close()


def _sqlite_pragmas(limits: Limits, dbapi_connection, _record) -> None:
    cur = dbapi_connection.cursor()
    with contextlib.suppress(sqlite3.OperationalError):  # read-only: keeps its journal
        cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
    cur.execute(f"PRAGMA busy_timeout={int(limits.busy_s * 1000)}")  # a writer waits
    cur.close()


def _remember(connections: weakref.WeakSet, lock: threading.Lock, dbapi_connection, _record):
    """A PostgreSQL connection, for Database._cut."""
    with lock:
        connections.add(dbapi_connection)
