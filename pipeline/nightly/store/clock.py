"""Two clocks. Leases are judged on the database's (CURRENT_TIMESTAMP), never a driver's: a
driver whose own clock is off takes no live driver's run. This host's is for the record only
(when a run started, when a cell finished)."""

import datetime as dt

from sqlalchemy import Float, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement


class db_now(FunctionElement):
    """Seconds since the epoch on the database's clock: CURRENT_TIMESTAMP (SQLite: 'now', the
    same clock to the millisecond; its CURRENT_TIMESTAMP has whole seconds only)."""

    type = Float()
    inherit_cache = True


@compiles(db_now)
def _db_now_sql(element, compiler, **kw) -> str:
    return "CAST(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) AS DOUBLE PRECISION)"


@compiles(db_now, "sqlite")
def _db_now_sqlite(element, compiler, **kw) -> str:
    return "((julianday('now') - 2440587.5) * 86400.0)"


def now_on(c) -> float:
    """The database's clock, now (seconds since the epoch)."""
    return c.execute(select(db_now())).scalar_one()


def now(offset_s: float = 0) -> str:
    """This host's time, for the record (started, finished): never to judge a lease by."""
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_s)
    return moment.isoformat(timespec="seconds")
