"""What the night and the report read back — runs, cells, metrics, history — and the baseline
they compare against, pinned by name."""

from sqlalchemy import delete, insert, select

from pipeline.core.errors import UserError
from pipeline.nightly.store import clock
from pipeline.nightly.store.connection import Database
from pipeline.nightly.store.holding import current_run
from pipeline.nightly.store.tables import Metric, baselines, cells, metrics, runs


def pin(db: Database, run_id: str, name: str = "default") -> None:
    db.require_writable()

    def work() -> None:
        with db.engine.begin() as c:
            if c.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
                raise UserError(f"no nightly run '{run_id}' in {db.url}")
            c.execute(delete(baselines).where(baselines.c.name == name))
            c.execute(insert(baselines).values(name=name, run_id=run_id, pinned=clock.now()))

    db.retried(f"pinning {run_id}", work)


def baseline(db: Database, name: str = "default") -> str | None:
    return db.read(
        "reading baselines",
        lambda c: c.execute(
            select(baselines.c.run_id).where(baselines.c.name == name)
        ).scalar_one_or_none(),
    )


def unfinished_run(db: Database, matrix_sha: str) -> str | None:
    """The matrix's current run, never ended (interrupted, or running): resumed, not redone."""
    return db.read("reading runs", lambda c: current_run(c, matrix_sha))


def cells_of(db: Database, run_id: str) -> list[dict]:
    def query(c) -> list[dict]:
        rows = c.execute(select(cells).where(cells.c.run_id == run_id)).mappings().all()
        return [dict(r) for r in rows]

    return db.read("reading cells", query)


def metrics_of(db: Database, run_id: str, model: str, cell: str) -> dict[str, Metric]:
    def query(c) -> dict[str, Metric]:
        rows = c.execute(
            select(metrics).where(
                metrics.c.run_id == run_id, metrics.c.model == model, metrics.c.cell == cell
            )
        ).mappings()
        return {
            r["name"]: Metric(r["name"], r["value"], r["se"], r["better"], r["kind"]) for r in rows
        }

    return db.read("reading metrics", query)


def previous_ok(db: Database, run_id: str, model: str, cell: str) -> str | None:
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

    return db.read("reading runs", query)


def run_ids(db: Database) -> list[dict]:
    """Every run, oldest first: {id, started, ended, git, matrix_sha}."""

    def query(c) -> list[dict]:
        rows = c.execute(
            select(runs.c.id, runs.c.started, runs.c.ended, runs.c.git, runs.c.matrix_sha).order_by(
                runs.c.started, runs.c.id
            )
        ).mappings()
        return [dict(r) for r in rows]

    return db.read("reading runs", query)


def history(db: Database) -> list[dict]:
    """Every metric row joined with its run's start time, oldest first."""

    def query(c) -> list[dict]:
        rows = c.execute(
            select(metrics, runs.c.started)
            .join(runs, runs.c.id == metrics.c.run_id)
            .order_by(runs.c.started, runs.c.id)
        ).mappings()
        return [dict(r) for r in rows]

    return db.read("reading metrics", query)
