"""The results database of nightly runs: SQLite by default, PostgreSQL (or any SQLAlchemy URL)
for a team. The schema is upgraded in place when a store opens (schema.py, Alembic).

`Store` is what the night and the report hold: a façade whose methods are the functions of
the same name in the module of their concern, handed the store's database and leases:

    tables.py      the tables, and what each row holds
    limits.py      leases and every wait on the database, in one place
    connection.py  the engine: opened at the schema's HEAD or refused in one line, every call
                   bounded by a deadline and retried (urls.py: the URL; failures.py: what a
                   database's error means)
    clock.py       the database's clock, that judges leases, and this host's, for the record
    holding.py     which run a driver works on: new, resumed, joined, taken over; ended
    claiming.py    which cells it runs: its claims, a dead driver's taken
    leases.py      its leases renewed and released, and its writes fenced (LeaseLost)
    recording.py   a cell's result, recorded once and fenced
    queries.py     what the night and the report read back, and the pinned baseline
"""

from pipeline.nightly.store import claiming, holding, leases, queries, recording
from pipeline.nightly.store.connection import SOURCE, Database
from pipeline.nightly.store.failures import StoreError
from pipeline.nightly.store.holding import changed, new_run_id
from pipeline.nightly.store.leases import ClaimsHeld, Held, LeaseLost
from pipeline.nightly.store.limits import HEARTBEAT_S, LEASE_S, LIMITS, Limits
from pipeline.nightly.store.tables import (
    Metric,
    Number,
    baselines,
    cells,
    claims,
    current_runs,
    meta,
    metrics,
    runs,
)

__all__ = [
    "HEARTBEAT_S", "LEASE_S", "LIMITS", "SOURCE", "Held", "LeaseLost", "Limits", "Metric",
    "Number", "Store", "StoreError", "baselines", "cells", "changed", "claims", "current_runs",
    "meta", "metrics", "new_run_id", "runs",
]  # fmt: skip


class Store:
    """`url`: any SQLAlchemy URL; `source`: where it came from, named in every error. A store
    closes its connections on `close()` (or `with Store(…)`), else when it is collected."""

    def __init__(
        self, url: str, lease_s: float = LEASE_S, limits: Limits = LIMITS, source: str = SOURCE
    ):
        self.db = Database(url, limits, source)
        self.url = self.db.url  # as it may be shown: never with its password
        self.source = source
        self.limits = limits
        self.engine = self.db.engine
        self.lease_s = lease_s
        self._mine: ClaimsHeld = set()  # the claims this store's driver holds

    def close(self) -> None:
        """Close its connections now; a later call opens new ones."""
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def require_writable(self) -> None:
        self.db.require_writable()

    # a driver's run, its cells and its leases
    def hold(
        self, matrix_sha: str, facts: dict, executor: str, owner: str, new: bool = False
    ) -> Held:
        return holding.hold(self.db, self.lease_s, matrix_sha, facts, executor, owner, new)

    def start_run(self, run_id: str, matrix_sha: str, facts: dict, executor: str) -> None:
        holding.start_run(self.db, self.lease_s, run_id, matrix_sha, facts, executor)

    def end_run(self, run_id: str) -> None:
        holding.end_run(self.db, run_id)

    def claim(self, held: Held, model: str, cell: str) -> bool:
        return claiming.claim(self.db, self.lease_s, self._mine, held, model, cell)

    def heartbeat(self, held: Held) -> None:
        leases.heartbeat(self.db, self.lease_s, self._mine, held)

    def release(self, held: Held) -> None:
        leases.release(self.db, self._mine, held)

    def record_cell(self, run_id: str, result: dict, held: Held | None = None) -> bool:
        return recording.record_cell(self.db, self._mine, run_id, result, held)

    # reads, and the baseline
    def pin(self, run_id: str, name: str = "default") -> None:
        queries.pin(self.db, run_id, name)

    def baseline(self, name: str = "default") -> str | None:
        return queries.baseline(self.db, name)

    def unfinished_run(self, matrix_sha: str) -> str | None:
        return queries.unfinished_run(self.db, matrix_sha)

    def cells_of(self, run_id: str) -> list[dict]:
        return queries.cells_of(self.db, run_id)

    def metrics_of(self, run_id: str, model: str, cell: str) -> dict[str, Metric]:
        return queries.metrics_of(self.db, run_id, model, cell)

    def previous_ok(self, run_id: str, model: str, cell: str) -> str | None:
        return queries.previous_ok(self.db, run_id, model, cell)

    def run_ids(self) -> list[dict]:
        return queries.run_ids(self.db)

    def history(self) -> list[dict]:
        return queries.history(self.db)
