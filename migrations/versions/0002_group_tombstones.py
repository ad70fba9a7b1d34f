"""Groups outlive their offsets (tombstones keep the generation), latest member, unobserved log starts, statement times."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"


def upgrade() -> None:
    op.add_column("groups", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True), schema=SCHEMA)
    op.add_column("groups", sa.Column("member_id", sa.Text(), server_default="", nullable=False), schema=SCHEMA)
    op.add_column("groups", sa.Column("member_host", sa.Text(), server_default="", nullable=False), schema=SCHEMA)
    # Groups deleted before this revision left only their history; their generation
    # lived there. Give each a tombstone, so that no later join can hand one out again.
    op.execute(
        f"""
        INSERT INTO {SCHEMA}.groups (group_id, generation, deleted_at)
        SELECT h.group_id, max(h.generation), max(h.change_time)
        FROM {SCHEMA}.offset_history AS h
        WHERE NOT EXISTS (SELECT 1 FROM {SCHEMA}.groups AS g WHERE g.group_id = h.group_id)
        GROUP BY h.group_id
        """
    )
    # A batch of a Spark query sees log ends but never the log start: NULL = not observed.
    op.alter_column("watermarks", "log_start_offset", nullable=True, schema=SCHEMA)
    # Times are the statement's, not the transaction's: a long sink batch commits its
    # offsets in its last statement, which is when the change becomes visible.
    for table, column in (("offsets", "commit_time"), ("offset_history", "change_time")):
        op.alter_column(table, column, server_default=sa.text("statement_timestamp()"), schema=SCHEMA)


def downgrade() -> None:
    for table, column in (("offsets", "commit_time"), ("offset_history", "change_time")):
        op.alter_column(table, column, server_default=sa.func.now(), schema=SCHEMA)
    # Revision 0001 needs a log start; one nobody observed is not invented here, and the
    # next report brings the partition back.
    op.execute(f"DELETE FROM {SCHEMA}.watermarks WHERE log_start_offset IS NULL")
    op.alter_column("watermarks", "log_start_offset", nullable=False, schema=SCHEMA)
    # Revision 0001 derives a deleted group's generation from its history again.
    op.execute(f"DELETE FROM {SCHEMA}.groups WHERE deleted_at IS NOT NULL")
    op.drop_column("groups", "member_host", schema=SCHEMA)
    op.drop_column("groups", "member_id", schema=SCHEMA)
    op.drop_column("groups", "deleted_at", schema=SCHEMA)
