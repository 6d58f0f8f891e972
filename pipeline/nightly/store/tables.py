"""The store's tables, as the code reads and writes them; the database is brought to them by
Alembic (schema.py, pipeline/nightly/migrations/versions), and a test checks the two agree.

    runs          one row per nightly run: id, times, git commit, library versions, host,
                  matrix, the driver holding it (owner), its lease (heartbeat, expires) and the
                  lease's generation (lease: one more at every takeover, the fencing token)
    current_runs  the one unfinished run of each matrix
    claims        the cells a driver is running now, each with its own lease (expires)
    cells         one row per (run, model, cell): status, error, the recipe overrides' hash,
                  the node and GPUs it ran on, what its artifact was calibrated on
    metrics       one row per (run, model, cell, metric): value (NaN and ±inf kept), SE,
                  which way is better
    baselines     pinned runs to compare against (name → run id)
"""

import math
from dataclasses import dataclass

from sqlalchemy import JSON, Column, Float, Integer, MetaData, String, Table, Text
from sqlalchemy.types import TypeDecorator


class Number(TypeDecorator):
    """A float column that keeps NaN and ±inf on every backend. PostgreSQL's double precision
    holds all three and SQLite's REAL holds ±inf, but SQLite has no NaN: it stores one as NULL
    (and a NOT NULL column refuses the row). There a NaN is the text 'NaN' in the REAL column —
    SQLite keeps text that is not a number as text, so `typeof(value)` says what it is — read
    back as float('nan')."""

    impl = Float
    cache_ok = True

    def bind_processor(self, dialect):
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value):  # instead of Float's, which would make the text a float again
            if value is None:
                return None
            return "NaN" if math.isnan(value) else float(value)

        return process

    def process_result_value(self, value, dialect):
        return None if value is None else float(value)


meta = MetaData()
runs = Table(
    "runs",
    meta,
    Column("id", String(40), primary_key=True),
    Column("started", String(32), nullable=False),
    Column("ended", String(32)),  # null: still running, or interrupted (then resumed)
    Column("matrix_sha", String(64), nullable=False),
    Column("git", JSON),
    Column("libraries", JSON),
    Column("host", JSON),
    Column("executor", String(16)),
    Column("owner", String(200)),  # the driver holding the run: host:pid:token
    # its lease, on the database's clock (seconds since the epoch): renewed while it runs
    Column("heartbeat", Float),  # the last renewal
    Column("expires", Float),  # null or past: lapsed, the run is free
    Column("lease", Integer, nullable=False, server_default="0"),  # +1 at every takeover
)
current_runs = Table(
    "current_runs",
    meta,
    Column("matrix_sha", String(64), primary_key=True),
    Column("run_id", String(40), nullable=False),
)
claims = Table(
    "claims",
    meta,
    Column("run_id", String(40), primary_key=True),
    Column("model", String(200), primary_key=True),
    Column("cell", String(200), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("expires", Float, nullable=False, server_default="0"),  # database clock
)
cells = Table(
    "cells",
    meta,
    Column("run_id", String(40), primary_key=True),
    Column("model", String(200), primary_key=True),
    Column("cell", String(200), primary_key=True),
    Column("recipe", String(200), nullable=False),
    Column("overrides_sha", String(64)),
    Column("status", String(16), nullable=False),  # ok | gate_failed | failed | skipped
    Column("error", Text),
    Column("stages", JSON),  # stage → done | cached | failed | skipped, and why
    Column("finished", String(32), nullable=False),
    Column("node", String(200)),  # where it ran: host, or host/Ray node id
    Column("gpus", JSON),  # the GPUs it was given (CUDA_VISIBLE_DEVICES / Ray's ids)
    Column("calibration", JSON),  # what its artifact was calibrated on (calibration_record.py)
)
metrics = Table(
    "metrics",
    meta,
    Column("run_id", String(40), primary_key=True),
    Column("model", String(200), primary_key=True),
    Column("cell", String(200), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("value", Number, nullable=False),
    Column("se", Number),  # standard error, where the metric has one
    Column("better", String(8), nullable=False),  # higher | lower
    Column("kind", String(16), nullable=False),  # quality | throughput | memory
)
baselines = Table(
    "baselines",
    meta,
    Column("name", String(64), primary_key=True),
    Column("run_id", String(40), nullable=False),
    Column("pinned", String(32), nullable=False),
)


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    se: float | None
    better: str
    kind: str


def match(table: Table, key: dict) -> list:
    """The row of `table` whose key columns hold `key`'s values, as a WHERE clause."""
    return [table.c[k] == v for k, v in key.items()]
