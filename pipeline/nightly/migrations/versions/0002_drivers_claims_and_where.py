"""Two drivers on one matrix, and where each cell ran.

runs.owner / runs.heartbeat: the driver holding the run and its lease. current_runs: the one
unfinished run per matrix (its primary key makes starting a run a race one driver wins).
claims: the cell a driver is running, with its own heartbeat (a stale claim may be taken over).
cells.node / cells.gpus: the node and the GPUs a cell ran on."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("owner", sa.String(200)))
        t.add_column(sa.Column("heartbeat", sa.String(32)))
    with op.batch_alter_table("cells") as t:
        t.add_column(sa.Column("node", sa.String(200)))
        t.add_column(sa.Column("gpus", sa.JSON))
    op.create_table(
        "current_runs",
        sa.Column("matrix_sha", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(40), nullable=False),
    )
    op.create_table(
        "claims",
        sa.Column("run_id", sa.String(40), primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("cell", sa.String(200), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("heartbeat", sa.String(32), nullable=False),
    )
    # an interrupted run of the old schema stays resumable: the latest unfinished per matrix
    op.execute(
        """
        INSERT INTO current_runs (matrix_sha, run_id)
        SELECT r.matrix_sha, MAX(r.id) FROM runs r
        WHERE r.ended IS NULL AND r.started = (
            SELECT MAX(s.started) FROM runs s WHERE s.matrix_sha = r.matrix_sha)
        GROUP BY r.matrix_sha
        """
    )
