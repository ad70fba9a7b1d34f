"""The history's ``source``: where an adoption's offsets came from (CHANGE_KIND_ADOPT).

A column with a constant default is a catalog change in PostgreSQL 11 and later: no table
rewrite, on the partitioned history and each of its day partitions alike (they inherit it,
and retention's ``CREATE TABLE ... (LIKE ... INCLUDING DEFAULTS)`` copies it).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"


def upgrade() -> None:
    op.add_column(
        "offset_history",
        sa.Column("source", sa.Text(), nullable=False, server_default=""),
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_column("offset_history", "source", schema=SCHEMA)
