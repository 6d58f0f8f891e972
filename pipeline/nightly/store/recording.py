"""A cell's result, written fenced (leases.py): the driver holding a cell's claim records its
result over whatever the cell has (only a writer without that claim could have put it there);
otherwise a cell is recorded once — a second write is a no-op — except that a real result
replaces a `failed` one. Each cell is written in one transaction."""

from sqlalchemy import delete, exc, insert, select, update
from sqlalchemy.engine import Connection

from pipeline.nightly.store import clock
from pipeline.nightly.store.connection import Database
from pipeline.nightly.store.leases import ClaimsHeld, Held, LeaseLost, pin_run, taken_run
from pipeline.nightly.store.tables import cells, claims, match, metrics


def record_cell(
    db: Database, mine: ClaimsHeld, run_id: str, result: dict, held: Held | None = None
) -> bool:
    """A cell's status and all its metrics, in one transaction (all or nothing); whether it
    was written. `held`: the driver's lease. Where another driver took its run or the cell,
    nothing is written, whatever the result, and LeaseLost says so; the driver holding the
    cell's claim writes over whatever the cell has. Otherwise once: a cell already recorded
    is left as it is (False), except that a real result replaces a `failed` one."""
    db.require_writable()
    key = {"run_id": run_id, "model": result["model"], "cell": result["cell"]}
    if held is not None:  # no longer this driver's to renew, whatever happens below
        mine.discard((run_id, held.owner, key["model"], key["cell"]))
    what = f"recording {key['model']} × {key['cell']}"
    written, lost = db.retried(what, lambda: _record(db, key, result, held))
    if lost:
        raise LeaseLost(
            f"{lost}: this driver stops (its result is not recorded: that driver runs the cell)"
        )
    return written


def _record(db: Database, key: dict, result: dict, held: Held | None) -> tuple[bool, str | None]:
    """(written, why this driver lost its lease or None)."""
    try:
        with db.engine.begin() as c:
            lost, claimed = _fenced(c, held, key) if held is not None else (None, False)
            written = lost is None and write(c, key, result, over=claimed)
            ours = [claims.c.owner == held.owner] if held is not None else []
            c.execute(delete(claims).where(*match(claims, key), *ours))
        return written, lost
    except exc.IntegrityError:
        with db.engine.connect() as c:  # check, then decide: another driver's record?
            if not recorded(c, key):
                raise
        return False, None


def insert_cell(c: Connection, key: dict, result: dict) -> None:
    where = result.get("where") or {}
    c.execute(
        insert(cells).values(
            **key,
            recipe=result["recipe"],
            overrides_sha=result.get("overrides_sha"),
            status=result["status"],
            error=result.get("error"),
            stages=result.get("stages"),
            finished=clock.now(),
            node=where.get("node"),
            gpus=where.get("gpus"),
            calibration=result.get("calibration"),
        )
    )
    rows = [{**key, **m} for m in result.get("metrics", [])]
    if rows:
        c.execute(insert(metrics), rows)


def write(c: Connection, key: dict, result: dict, over: bool) -> bool:
    """The result into an empty cell, or `over` whatever it holds (the claim's holder: a
    row there was written without that claim), or a real result over a failed one."""
    status = c.execute(select(cells.c.status).where(*match(cells, key))).scalar()
    real = result["status"] != "failed"
    if status is not None and not (over or (status == "failed" and real)):
        return False
    if status is not None:
        c.execute(delete(metrics).where(*match(metrics, key)))
        c.execute(delete(cells).where(*match(cells, key)))
    insert_cell(c, key, result)
    return True


def _fenced(c: Connection, held: Held, key: dict) -> tuple[str | None, bool]:
    """(why this driver may no longer write this cell — its run or its claim taken — or
    None; whether it holds the cell's claim). Both held until the transaction ends."""
    if not pin_run(c, held):
        return taken_run(c, held), False
    where = match(claims, key)
    pinned = c.execute(
        update(claims).where(*where, claims.c.owner == held.owner).values(owner=claims.c.owner)
    )
    if pinned.rowcount == 1:
        return None, True
    owner = c.execute(select(claims.c.owner).where(*where)).scalar()
    if owner is None:  # released, or deleted by an earlier try of this very record
        return None, False
    return (
        f"nightly run {held.run_id}: {key['model']} × {key['cell']} was taken over by "
        f"{owner} (this driver's lease on it had lapsed)"
    ), False


def recorded(c, key: dict) -> bool:
    found = select(cells.c.status).where(*match(cells, key))
    return c.execute(found).first() is not None
