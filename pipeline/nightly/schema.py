"""The store's schema, upgraded in place by Alembic (pipeline/nightly/migrations/versions) when
a store opens: a database written by an earlier schema keeps its history. One upgrader at a time:
PostgreSQL's advisory lock, a lock file beside a SQLite database (taken only when there is
something to upgrade, so a database at HEAD opens without writing beside it). A database at a
revision this checkout does not know (a newer one's) is refused: Newer."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Connection, Engine, inspect, text

from pipeline.core.files import waiting_lock

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0004"
FIRST = "0001"  # what create_all wrote before there were migrations
# every revision this checkout has: the versions' file names start with theirs
REVISIONS = frozenset(p.name.partition("_")[0] for p in (MIGRATIONS / "versions").glob("0*.py"))
_LOCK_KEY = 0x6E696768  # any constant: the advisory lock's id


class Newer(Exception):
    """The database is at a revision this checkout does not know: written by newer code."""

    def __init__(self, revision: str):
        super().__init__(f"schema revision {revision} is newer than {HEAD}")
        self.revision = revision


def upgrade(engine: Engine) -> None:
    """Bring the database to HEAD (a new one: every revision; an old one: what it misses)."""
    with engine.connect() as conn:
        if _checked(current(conn)) == HEAD:  # most opens: nothing to do, no lock
            return
    with _exclusive(engine) as conn:
        if _checked(current(conn)) == HEAD:  # another upgrader was first
            return
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        tables = set(inspect(conn).get_table_names())
        if "runs" in tables and "alembic_version" not in tables:
            command.stamp(cfg, FIRST)
        command.upgrade(cfg, "head")


def current(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def _checked(revision: str | None) -> str | None:
    if revision is not None and revision not in REVISIONS:
        raise Newer(revision)
    return revision


@contextlib.contextmanager
def _exclusive(engine: Engine) -> Iterator[Connection]:
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            yield conn
        return
    database = engine.url.database
    lock = Path(f"{database}.migrate.lock") if database and database != ":memory:" else None
    with waiting_lock(lock) if lock else contextlib.nullcontext(), engine.begin() as conn:
        yield conn
