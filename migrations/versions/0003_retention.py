"""Retention: history range-partitioned by day (the old table attached whole), groups' last activity.

The existing history is not copied: the old table becomes the partition
``offset_history_before_<tomorrow>`` holding everything before tomorrow (UTC), and new
rows from tomorrow on go to daily partitions. Attaching costs one scan of the old table
(to check its bound) and one index build (the primary key must hold the partition key,
so it becomes (id, change_time)); both run under the table's lock, so commits wait for
them: seconds per million rows. The old table's two indexes are kept and attached as
they are. Retention later drops that partition whole, once its newest day is past the
history retention.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"
H = f"{SCHEMA}.offset_history"
# Daily partitions made at once; the server's maintenance keeps making them ahead.
DAYS_AHEAD = 3


def _columns() -> list[sa.Column]:
    return [
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("previous_offset", sa.BigInteger(), nullable=True),
        sa.Column("new_offset", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column(
            "change_time", sa.DateTime(timezone=True), server_default=sa.text("statement_timestamp()"), nullable=False
        ),
        sa.Column("actor", sa.Text(), server_default="", nullable=False),
    ]


def _day(value: datetime) -> str:
    return value.strftime("%Y%m%d")


def upgrade() -> None:
    # now() is stable: every existing group gets the migration's time without a table
    # rewrite, so no group expires the moment retention is turned on.
    op.add_column(
        "groups",
        sa.Column("active_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        schema=SCHEMA,
    )

    bind = op.get_bind()
    now = bind.execute(sa.select(sa.func.now())).scalar_one().astimezone(UTC)
    tomorrow = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    before = f"offset_history_before_{_day(tomorrow)}"
    last_id = bind.execute(sa.text(f"SELECT coalesce(max(id), 0) FROM {H}")).scalar_one()

    # The old table, as it is, becomes the partition of everything before tomorrow.
    op.execute(f"ALTER TABLE {H} RENAME TO {before}")
    op.execute(f"ALTER TABLE {SCHEMA}.{before} ALTER COLUMN id DROP IDENTITY")
    op.execute(f"ALTER TABLE {SCHEMA}.{before} DROP CONSTRAINT pk_offset_history")
    for index in ("group_id_id", "group_id_topic_partition_id"):
        op.execute(f"ALTER INDEX {SCHEMA}.ix_offset_history_{index} RENAME TO {before}_{index}")

    op.create_table(
        "offset_history",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True, start=last_id + 1), nullable=False),
        *_columns(),
        sa.PrimaryKeyConstraint("id", "change_time", name="pk_offset_history"),
        schema=SCHEMA,
        postgresql_partition_by="RANGE (change_time)",
    )
    op.create_index("ix_offset_history_group_id_id", "offset_history", ["group_id", "id"], schema=SCHEMA)
    op.create_index(
        "ix_offset_history_group_id_topic_partition_id",
        "offset_history",
        ["group_id", "topic", "partition", "id"],
        schema=SCHEMA,
    )
    # Rows whose day has no partition yet (maintenance behind) land here; maintenance
    # moves them into their day's partition when it makes it.
    op.execute(f"CREATE TABLE {SCHEMA}.offset_history_default PARTITION OF {H} DEFAULT")
    # Its indexes are attached, not rebuilt; the primary key's is built.
    op.execute(
        f"ALTER TABLE {H} ATTACH PARTITION {SCHEMA}.{before} FOR VALUES FROM (MINVALUE) TO ('{tomorrow.isoformat()}')"
    )
    for n in range(DAYS_AHEAD):
        lo = tomorrow + timedelta(days=n)
        op.execute(
            f"CREATE TABLE {SCHEMA}.offset_history_p{_day(lo)} PARTITION OF {H}"
            f" FOR VALUES FROM ('{lo.isoformat()}') TO ('{(lo + timedelta(days=1)).isoformat()}')"
        )


def downgrade() -> None:
    # Back to one plain table: a copy, in id order (downgrades are rare and may be slow).
    op.execute(f"ALTER TABLE {H} RENAME TO offset_history_partitioned")
    op.execute(f"ALTER INDEX {SCHEMA}.pk_offset_history RENAME TO pk_offset_history_partitioned")
    for index in ("group_id_id", "group_id_topic_partition_id"):
        op.execute(f"ALTER INDEX {SCHEMA}.ix_offset_history_{index} RENAME TO ix_offset_history_partitioned_{index}")
    bind = op.get_bind()
    last_id = bind.execute(
        sa.text(f"SELECT coalesce(max(id), 0) FROM {SCHEMA}.offset_history_partitioned")
    ).scalar_one()
    op.create_table(
        "offset_history",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True, start=last_id + 1), nullable=False),
        *_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_offset_history"),
        schema=SCHEMA,
    )
    op.execute(f"INSERT INTO {H} OVERRIDING SYSTEM VALUE SELECT * FROM {SCHEMA}.offset_history_partitioned ORDER BY id")
    # Partitions go with their parent.
    op.drop_table("offset_history_partitioned", schema=SCHEMA)
    op.create_index("ix_offset_history_group_id_id", "offset_history", ["group_id", "id"], schema=SCHEMA)
    op.create_index(
        "ix_offset_history_group_id_topic_partition_id",
        "offset_history",
        ["group_id", "topic", "partition", "id"],
        schema=SCHEMA,
    )
    op.drop_column("groups", "active_at", schema=SCHEMA)
