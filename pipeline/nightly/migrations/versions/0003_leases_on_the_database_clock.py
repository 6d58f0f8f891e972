"""Leases on the database's clock, with a fencing token.

runs.heartbeat and claims.heartbeat were each driver's own clock as text, compared with another
driver's clock. Now runs.heartbeat (the last renewal), runs.expires and claims.expires (when the
lease lapses) are seconds since the epoch on the database's clock, and runs.lease counts the
run's takeovers: a driver's writes name the lease it took, and one whose lease was taken is
refused (store/leases.py). Leases held while the database is upgraded are left lapsed (the earlier
code's drivers cannot renew them any more): an interrupted run is resumed at once."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("runs") as t:
        t.drop_column("heartbeat")
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("heartbeat", sa.Float))
        t.add_column(sa.Column("expires", sa.Float))
        t.add_column(sa.Column("lease", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("claims") as t:
        t.drop_column("heartbeat")
        t.add_column(sa.Column("expires", sa.Float, nullable=False, server_default="0"))
