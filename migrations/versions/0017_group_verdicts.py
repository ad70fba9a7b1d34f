"""The kept verdicts of large groups (``group_verdicts``): what DescribeGroup's first page reads instead of every partition.

A table of its own, written by the maintenance round only: no trigger, no column on a table the
commits write, so the commit path is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"


def upgrade() -> None:
    op.create_table(
        "group_verdicts",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("status_window", sa.Float(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("evaluated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reset_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name=op.f("pk_group_verdicts")),
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_table("group_verdicts", schema=SCHEMA)
