"""What a database's error means for the store: worth another try (a lost connection, a
timeout, a busy SQLite), busy for now (Transient, exit 75: it clears by itself), or a host that
may not write the file; and the error as one line, its passwords masked."""

from sqlalchemy import exc

from pipeline.core import secrets
from pipeline.core.errors import PipelineError, first_line


class StoreError(PipelineError):
    """The database did not answer within the store's tries (Limits)."""

    reason = "server_error"


def said(e: BaseException) -> str:
    """A driver's error as one line, its passwords masked."""
    return secrets.text(first_line(getattr(e, "orig", None) or e))


def transient(e: exc.DBAPIError) -> bool:
    """A lost connection, a timeout, a busy SQLite: worth another try."""
    return e.connection_invalidated or isinstance(e, exc.OperationalError | exc.InterfaceError)


def locked(e: exc.DBAPIError) -> bool:
    """SQLite's lock held by another connection past the busy timeout ("database is locked")."""
    name = getattr(e.orig, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def busy_server(e: exc.DBAPIError) -> bool:
    """PostgreSQL busy for now: it took the connection and did not answer within connect_timeout
    (a server stopped or overloaded; a wrong address refuses or does not resolve instead), or a
    statement waited on another session's lock (an upgrader's) past statement_timeout."""
    if getattr(e.orig, "sqlstate", None) in ("57014", "55P03"):  # canceled; lock not available
        return True
    try:
        from psycopg.errors import ConnectionTimeout
    except ImportError:  # no PostgreSQL driver: no PostgreSQL store
        return False
    return isinstance(e.orig, ConnectionTimeout)


def read_only(e: exc.DBAPIError) -> bool:
    """SQLite could not write the file (read-only file, folder or mount)."""
    name = getattr(e.orig, "sqlite_errorname", "")
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM"))
