"""A driver's leases — on its run, and on each cell it claimed — judged on the database's clock
(clock.py): renewed by its heartbeat, freed when it stops, lapsed when it falls silent.

Fencing: a driver's writes name what it holds — the run's lease generation for its holder, its
claim for a cell — and once another driver took either, they are refused (LeaseLost), its
results included, `ok` or `failed`: the driver stops its cells and says so, and the new holder
runs them and records its own. The check writes what it names back unchanged, so it holds
until the record commits (PostgreSQL's row locks, SQLite's one writer): a takeover waits for a
record under way, and no stale result lands after it."""

import contextlib
import os
import socket
from dataclasses import dataclass

from sqlalchemy import delete, exc, select, update
from sqlalchemy.engine import Connection

from pipeline.core.errors import PipelineError
from pipeline.nightly.store import clock
from pipeline.nightly.store.connection import Database
from pipeline.nightly.store.tables import claims, runs

# the claims a store's driver holds, to renew and to check: (run, owner, model, cell)
ClaimsHeld = set[tuple[str, str, str, str]]


class LeaseLost(PipelineError):
    """Another driver took this driver's run or one of its cells (its lease had lapsed): this
    driver's writes are refused from now on, and it stops."""


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


def expiry(lease_s: float):
    """When a lease taken or renewed now lapses, on the database's clock."""
    return clock.db_now() + lease_s


def gone(moment: float, owner: str | None, expires: float | None) -> bool:
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


def heartbeat(db: Database, lease_s: float, mine: ClaimsHeld, held: Held) -> None:
    """Renew this driver's leases: on the run, if it holds it, and on its claims. LeaseLost
    where another driver took either."""
    db.retried("renewing this driver's leases", lambda: _beat(db, lease_s, mine, held))


def _beat(db: Database, lease_s: float, mine: ClaimsHeld, held: Held) -> None:
    with db.engine.begin() as c:
        if held.lease is not None:
            renewed = c.execute(
                update(runs)
                .where(runs.c.id == held.run_id, runs.c.lease == held.lease)
                .values(heartbeat=clock.db_now(), expires=expiry(lease_s))
            )
            if renewed.rowcount == 0:
                raise LeaseLost(taken_run(c, held))
        c.execute(
            update(claims)
            .where(claims.c.run_id == held.run_id, claims.c.owner == held.owner)
            .values(expires=expiry(lease_s))
        )
        ours = {(m, x) for r, o, m, x in set(mine) if (r, o) == (held.run_id, held.owner)}
        others = c.execute(
            select(claims.c.model, claims.c.cell, claims.c.owner).where(
                claims.c.run_id == held.run_id, claims.c.owner != held.owner
            )
        )
        for model, cell, owner in others:
            if (model, cell) in ours:
                raise LeaseLost(
                    f"nightly run {held.run_id}: {model} × {cell} was taken over by {owner} "
                    "(this driver's lease on it had lapsed): this driver stops"
                )


def release(db: Database, mine: ClaimsHeld, held: Held) -> None:
    """This driver stops: its claims are free at once, and its run's lease if it still
    holds it (the next driver resumes without waiting for the lapse). One try: where the
    database does not answer, they lapse."""
    for r, o, m, x in set(mine):
        if (r, o) == (held.run_id, held.owner):
            mine.discard((r, o, m, x))
    with contextlib.suppress(exc.DBAPIError), db.deadline(), db.engine.begin() as c:
        c.execute(
            delete(claims).where(claims.c.run_id == held.run_id, claims.c.owner == held.owner)
        )
        if held.lease is not None:
            c.execute(
                update(runs)
                .where(runs.c.id == held.run_id, runs.c.lease == held.lease)
                .values(expires=None)
            )


# fencing
def pin_run(c: Connection, held: Held) -> bool:
    """Whether this driver still holds its run (a joined driver holds none: True). Checked
    by writing its lease back unchanged, so it stays this driver's until the transaction
    ends: a takeover waits for it (PostgreSQL's row lock; SQLite's lock, taken by the first
    write), and nothing this driver writes lands after one."""
    if held.lease is None:
        return True
    pinned = c.execute(
        update(runs)
        .where(runs.c.id == held.run_id, runs.c.lease == held.lease)
        .values(lease=runs.c.lease)
    )
    return pinned.rowcount == 1


def fence_run(c: Connection, held: Held) -> None:
    if not pin_run(c, held):
        raise LeaseLost(taken_run(c, held) + ": this driver stops")


def taken_run(c: Connection, held: Held) -> str:
    run = c.execute(select(runs.c.owner, runs.c.lease).where(runs.c.id == held.run_id)).first()
    who = f"{run.owner} (lease {held.lease} → {run.lease})" if run else "nobody (deleted)"
    return f"nightly run {held.run_id} was taken over by {who}: this driver's lease had lapsed"
