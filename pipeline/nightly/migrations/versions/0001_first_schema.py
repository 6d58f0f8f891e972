"""The store as the first nightly wrote it (SQLAlchemy's create_all, before migrations): runs,
cells, metrics, baselines. A database without alembic_version but with these tables is stamped
at this revision, then upgraded."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("started", sa.String(32), nullable=False),
        sa.Column("ended", sa.String(32)),
        sa.Column("matrix_sha", sa.String(64), nullable=False),
        sa.Column("git", sa.JSON),
        sa.Column("libraries", sa.JSON),
        sa.Column("host", sa.JSON),
        sa.Column("executor", sa.String(16)),
    )
    op.create_table(
        "cells",
        sa.Column("run_id", sa.String(40), primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("cell", sa.String(200), primary_key=True),
        sa.Column("recipe", sa.String(200), nullable=False),
        sa.Column("overrides_sha", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("stages", sa.JSON),
        sa.Column("finished", sa.String(32), nullable=False),
    )
    op.create_table(
        "metrics",
        sa.Column("run_id", sa.String(40), primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("cell", sa.String(200), primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("se", sa.Float),
        sa.Column("better", sa.String(8), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
    )
    op.create_table(
        "baselines",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("pinned", sa.String(32), nullable=False),
    )
