"""Initial schema: groups, offsets, offset history and watermarks in the ``offsetstore`` schema."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision is a frozen snapshot: it names the schema itself instead of
# importing the models, which keep changing after it was written.
SCHEMA = "offsetstore"


def upgrade() -> None:
    op.execute(sa.schema.CreateSchema(SCHEMA, if_not_exists=True))

    op.create_table(
        "groups",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("reset_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name="pk_groups"),
        sa.CheckConstraint("generation >= 0", name="ck_groups_generation_non_negative"),
        schema=SCHEMA,
    )

    op.create_table(
        "offsets",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("metadata", sa.Text(), server_default="", nullable=False),
        sa.Column("commit_time", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", name="pk_offsets"),
        sa.CheckConstraint('"offset" >= -2', name="ck_offsets_offset_valid"),
        sa.CheckConstraint("partition >= 0", name="ck_offsets_partition_non_negative"),
        schema=SCHEMA,
    )

    op.create_table(
        "offset_history",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("previous_offset", sa.BigInteger(), nullable=True),
        sa.Column("new_offset", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("change_time", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("actor", sa.Text(), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_offset_history"),
        schema=SCHEMA,
    )
    op.create_index("ix_offset_history_group_id_id", "offset_history", ["group_id", "id"], schema=SCHEMA)
    op.create_index(
        "ix_offset_history_group_id_topic_partition_id",
        "offset_history",
        ["group_id", "topic", "partition", "id"],
        schema=SCHEMA,
    )

    op.create_table(
        "watermarks",
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("log_start_offset", sa.BigInteger(), nullable=False),
        sa.Column("log_end_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("topic", "partition", name="pk_watermarks"),
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_table("watermarks", schema=SCHEMA)
    # Its indexes go with the table.
    op.drop_table("offset_history", schema=SCHEMA)
    op.drop_table("offsets", schema=SCHEMA)
    op.drop_table("groups", schema=SCHEMA)
    # The schema itself is dropped by env.py once Alembic has cleared its
    # version table, which lives in the same schema.
