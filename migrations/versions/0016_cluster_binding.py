"""A group's Kafka cluster id, and the fingerprint of the record before each committed offset (issue 58).

Two new tables and nothing else: ``group_clusters`` (a group's bound cluster id) and
``record_fingerprints`` (written only by the writers that have the record). No existing table is
altered, so the upgrade takes no lock a running writer holds (a column on ``groups`` did: its
ACCESS EXCLUSIVE lock, in the upgrade's transaction after 0013's on the history, deadlocked a
running SQL API consumer).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"


def upgrade() -> None:
    op.create_table(
        "group_clusters",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("kafka_cluster_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", name="pk_group_clusters"),
        schema=SCHEMA,
    )
    op.create_table(
        "record_fingerprints",
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "topic", "partition", name="pk_record_fingerprints"),
        schema=SCHEMA,
    )


def downgrade() -> None:
    op.drop_table("record_fingerprints", schema=SCHEMA)
    op.drop_table("group_clusters", schema=SCHEMA)
