"""Which run a driver works on. Two drivers on one matrix: the first to insert the matrix's
current run holds it; a second joins it and takes only cells nobody has claimed (claiming.py).
A run is one commit and one set of library versions: a night whose facts differ does not resume
or join it (`changed`)."""

import datetime as dt
from dataclasses import replace
from secrets import token_hex

from sqlalchemy import delete, exc, insert, select, update
from sqlalchemy.engine import Connection

from pipeline.core.errors import UserError
from pipeline.nightly.store import clock
from pipeline.nightly.store.connection import Database
from pipeline.nightly.store.leases import Held, expiry, gone
from pipeline.nightly.store.tables import claims, current_runs, runs


class _Raced(Exception):
    """Another driver moved the matrix's current run first: roll back, look again."""


def hold(
    db: Database,
    lease_s: float,
    matrix_sha: str,
    facts: dict,
    executor: str,
    owner: str,
    new: bool = False,
) -> Held:
    """The run this driver works on: the matrix's unfinished run (joined while its driver's
    lease holds, else taken over), or a new one (`new`: always; and where the unfinished
    run's facts differ from these: its cells and these may not share a run)."""
    db.require_writable()
    return db.retried(
        "starting a run", lambda: _hold(db, lease_s, matrix_sha, facts, executor, owner, new)
    )


def _hold(
    db: Database, lease_s: float, matrix_sha: str, facts: dict, executor: str, owner: str, new: bool
) -> Held:
    for _ in range(5):  # a race lost to another driver: look again
        why = None
        with db.engine.begin() as c:
            current = current_run(c, matrix_sha)
            if current and not new:
                run = c.execute(select(runs).where(runs.c.id == current)).mappings().one()
                why = changed(run, facts, executor)
                found = _resume(c, lease_s, run, owner, why)
                if found is not None:
                    return found
                if not why:
                    continue  # another driver took it over first
        held = _start(db, lease_s, matrix_sha, facts, executor, owner, current)
        if held is not None:
            return replace(held, replaced=current, why=why) if why else held
    raise RuntimeError(f"could not start or join a run of matrix {matrix_sha[:12]}")


def _resume(c: Connection, lease_s: float, run, owner: str, why: str | None) -> Held | None:
    """Join the run while its holder lives, else take it over (None: not this one)."""
    if run["owner"] == owner:  # a retried hold of this driver's
        return Held(run["id"], owner, resumed=True, lease=run["lease"])
    moment = clock.now_on(c)
    if not gone(moment, run["owner"], run["expires"]):
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
        .values(owner=owner, lease=lease, heartbeat=clock.db_now(), expires=expiry(lease_s))
    )
    return Held(run["id"], owner, resumed=True, lease=lease) if taken.rowcount == 1 else None


def _start(
    db: Database,
    lease_s: float,
    matrix_sha: str,
    facts: dict,
    executor: str,
    owner: str,
    current: str | None,
) -> Held | None:
    """A new run as the matrix's current one (None: another driver's won the race)."""
    run_id = new_run_id()
    try:
        with db.engine.begin() as c:
            _insert_run(c, lease_s, run_id, matrix_sha, facts, executor, owner)
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
        with db.engine.connect() as c:  # check, then decide: lost a race, or a real error
            if current_run(c, matrix_sha) is None:
                raise
        return None
    return Held(run_id, owner, resumed=False, lease=1)


def start_run(
    db: Database, lease_s: float, run_id: str, matrix_sha: str, facts: dict, executor: str
) -> None:
    """A run outside any matrix's current run (tests, imports)."""
    db.require_writable()

    def work() -> None:
        with db.engine.begin() as c:
            _insert_run(c, lease_s, run_id, matrix_sha, facts, executor, None)

    db.retried(f"starting run {run_id}", work)


def _insert_run(c, lease_s, run_id, matrix_sha, facts, executor, owner) -> None:
    """facts: {"git", "libraries", "host"} of the machine that drives the run."""
    lease = {"heartbeat": clock.db_now(), "expires": expiry(lease_s), "lease": 1} if owner else {}
    c.execute(
        insert(runs).values(
            id=run_id, started=clock.now(), matrix_sha=matrix_sha, executor=executor, owner=owner,
            **lease, **facts,
        )
    )  # fmt: skip


def end_run(db: Database, run_id: str) -> None:
    db.require_writable()

    def work() -> None:
        with db.engine.begin() as c:
            c.execute(update(runs).where(runs.c.id == run_id).values(ended=clock.now()))
            c.execute(delete(current_runs).where(current_runs.c.run_id == run_id))
            c.execute(delete(claims).where(claims.c.run_id == run_id))

    db.retried(f"ending run {run_id}", work)


def current_run(c, matrix_sha: str) -> str | None:
    return c.execute(
        select(current_runs.c.run_id).where(current_runs.c.matrix_sha == matrix_sha)
    ).scalar_one_or_none()


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


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + token_hex(3)
