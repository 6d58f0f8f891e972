"""Which cells a driver runs: those not recorded and nobody's claim — or a claim whose lease
lapsed, free again: its driver died (on the same host, a driver whose process is gone is dead
at once)."""

from sqlalchemy import delete, exc, insert, select, update
from sqlalchemy.engine import Connection

from pipeline.nightly.store import clock
from pipeline.nightly.store.connection import Database
from pipeline.nightly.store.leases import ClaimsHeld, Held, expiry, fence_run, gone
from pipeline.nightly.store.recording import recorded
from pipeline.nightly.store.tables import claims, match


def claim(
    db: Database, lease_s: float, mine: ClaimsHeld, held: Held, model: str, cell: str
) -> bool:
    """Whether this driver may run the cell: not recorded, and unclaimed, its claim lapsed,
    or claimed by this driver already. LeaseLost where another driver took this one's run."""
    db.require_writable()
    key = {"run_id": held.run_id, "model": model, "cell": cell}
    got = db.retried(f"claiming {model} × {cell}", lambda: _claim(db, lease_s, held, key))
    if got:
        mine.add((held.run_id, held.owner, model, cell))
    return got


def _claim(db: Database, lease_s: float, held: Held, key: dict) -> bool:
    for _ in range(5):  # a claim released between our insert and our look: again
        try:
            with db.engine.begin() as c:
                fence_run(c, held)
                c.execute(insert(claims).values(**key, owner=held.owner, expires=expiry(lease_s)))
                # checked after the insert: a claim deleted as its cell was recorded lets the
                # insert through, and only now is that record visible
                if recorded(c, key):
                    c.execute(delete(claims).where(*match(claims, key)))
                    return False
                return True
        except exc.IntegrityError:  # check, then decide: claimed, or a real error
            pass
        with db.engine.begin() as c:
            fence_run(c, held)
            taken = _take_claim(c, lease_s, held, key)
            if taken is not None:
                return taken
            if not recorded(c, key):
                continue  # nobody's claim, nobody's record: released meanwhile
            return False
    raise RuntimeError(f"could not claim {key['model']} × {key['cell']}")


def _take_claim(c: Connection, lease_s: float, held: Held, key: dict) -> bool | None:
    """The cell's claim: this driver's, or taken from a driver that is gone (None: there is
    no claim)."""
    where = match(claims, key)
    found = c.execute(select(claims.c.owner, claims.c.expires).where(*where)).first()
    if found is None:
        return None
    if found.owner == held.owner:  # a retried claim of this driver's
        return not recorded(c, key)
    if not gone(clock.now_on(c), found.owner, found.expires):
        return False
    taken = c.execute(
        update(claims)
        .where(*where, claims.c.owner == found.owner, claims.c.expires == found.expires)
        .values(owner=held.owner, expires=expiry(lease_s))
    )
    return taken.rowcount == 1 and not recorded(c, key)
