"""What each cell's artifact was calibrated on.

cells.calibration: the quantize stage's record (pipeline/quantize/calibration_record.py: source,
split, samples, sequence length, seed, sha256 of the token ids); null where it calibrated nothing
or was recorded before this revision."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("cells") as t:
        t.add_column(sa.Column("calibration", sa.JSON))
