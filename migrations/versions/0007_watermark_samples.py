"""Log end samples per partition over time, from which DescribeGroup and /metrics derive lag in seconds.

Each watermark report also records (log end, time) for its partitions in a ring of slots per
partition, one slot per period of a few seconds (storage/lag.py); the time at which the log
end passed a group's committed offset is interpolated between them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"


def upgrade() -> None:
    op.create_table(
        "watermark_samples",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("log_end_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", "slot", name=op.f("pk_watermark_samples")),
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_table("watermark_samples", schema=SCHEMA)
