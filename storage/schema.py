"""The store's tables, in their own PostgreSQL schema ``offsetstore``; Alembic migrates them."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    func,
    text,
)

SCHEMA = "offsetstore"

metadata = MetaData(
    schema=SCHEMA,
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    },
)

# One row per group id ever seen. Its generation fences writers; every write to a
# group's offsets locks this row first, so generation checks are never read-then-write.
# The row outlives the group's offsets: deleting a group leaves it as a tombstone
# (deleted_at set), so a group id's generation strictly increases forever.
groups = Table(
    "groups",
    metadata,
    Column("group_id", Text, primary_key=True),
    Column("generation", BigInteger, nullable=False, server_default="0"),
    # Resets and deletes so far: lets a Spark query derive a fresh checkpoint after either.
    Column("reset_count", BigInteger, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Set while the group is deleted: it has no offsets and is listed nowhere.
    Column("deleted_at", DateTime(timezone=True), nullable=True),
    # The member id and peer address of the latest JoinGroup.
    Column("member_id", Text, nullable=False, server_default=""),
    Column("member_host", Text, nullable=False, server_default=""),
    # The latest creation, join or reset. A commit's activity shows in its offsets'
    # commit_time instead, so that commits write nothing here. Not indexed: updates
    # stay HOT, and the maintenance round reads the table once a minute.
    Column("active_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("generation >= 0", name="generation_non_negative"),
    # Live group ids by prefix, for the group quota's count: the primary key's collation
    # cannot serve a prefix. Updates that leave group_id and deleted_at alone stay HOT.
    Index(
        "ix_groups_live_prefix",
        "group_id",
        postgresql_ops={"group_id": "text_pattern_ops"},
        postgresql_where=text("deleted_at IS NULL"),
    ),
)

# The groups that are observed (ObserveOffsets, migration 0015): a pipeline keeps their positions
# itself (a Spark checkpoint, a Kafka group) and offsetstore records them. Commits and sinks to
# them are refused (write_batch reads this under the group's lock) until an adoption or a delete
# of the group removes the row. A table of its own, not a column of groups: adding a column
# would lock groups for the upgrade, behind every writer that holds a group's row.
observed_groups = Table(
    "observed_groups",
    metadata,
    Column("group_id", Text, primary_key=True),
    # Where its latest positions were read: spark:<query id>, kafka:<cluster>/<group>, ...
    Column("source", Text, nullable=False),
    Column("observed_since", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Partitions whose position the source no longer has (a Kafka group's offsets expired or
    # deleted), and since when; their last observed positions stay in offsets.
    Column("lost_partitions", Integer, nullable=False, server_default="0"),
    Column("lost_since", DateTime(timezone=True), nullable=True),
)

# The next offset to consume per (group, topic, partition). -2 and -1 are the
# earliest/latest sentinels a reset stores when no watermark is known.
offsets = Table(
    "offsets",
    metadata,
    Column("group_id", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, nullable=False),
    Column("metadata", Text, nullable=False, server_default=""),
    # When the commit's statement ran, which for a long transaction is near its COMMIT.
    Column("commit_time", DateTime(timezone=True), nullable=False, server_default=func.statement_timestamp()),
    CheckConstraint('"offset" >= -2', name="offset_valid"),
    CheckConstraint("partition >= 0", name="partition_non_negative"),
)

# Append-only audit trail. No foreign key: the history outlives a deleted group.
# Range-partitioned by change_time, one partition a day (offset_history_pYYYYMMDD), an
# offset_history_before_YYYYMMDD partition for everything older and a DEFAULT partition
# that catches rows when maintenance is behind; retention drops whole partitions
# (storage/retention/partitions.py). The primary key must hold the partition key.
offset_history = Table(
    "offset_history",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("group_id", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("previous_offset", BigInteger, nullable=True),
    Column("new_offset", BigInteger, nullable=True),
    Column("kind", SmallInteger, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column(
        "change_time",
        DateTime(timezone=True),
        primary_key=True,
        nullable=False,
        server_default=func.statement_timestamp(),
    ),
    Column("actor", Text, nullable=False, server_default=""),
    # Where an adoption's offsets came from (CHANGE_KIND_ADOPT); empty for every other change.
    Column("source", Text, nullable=False, server_default=""),
    # ListOffsetHistory of a group, newest first.
    Index(None, "group_id", "id"),
    # ListOffsetHistory with a topic filter; a reset to a commit time, per partition.
    Index(None, "group_id", "topic", "partition", "id"),
    postgresql_partition_by="RANGE (change_time)",
)

# The Kafka cluster id a group's positions belong to (migration 0016): bound by its first writer
# that knows one, changed only by a switch; no row: never bound (older groups). A table of its own,
# not a column of ``groups``: adding a column takes ``groups``' ACCESS EXCLUSIVE lock inside the
# upgrade's transaction, which deadlocked a running SQL API consumer (tests/migrations/test_sql_api_upgrade.py).
group_clusters = Table(
    "group_clusters",
    metadata,
    Column("group_id", Text, primary_key=True),
    Column("kafka_cluster_id", Text, nullable=False),
)

# What identifies the record just before a committed offset (migration 0016): a switch to another
# cluster finds that record there. Written in the committing transaction by the writers that
# have the record; valid while ``offset`` is still the partition's stored offset. No foreign key,
# like the history: a reset leaves it, and ``offset`` tells it apart from the offset now stored.
record_fingerprints = Table(
    "record_fingerprints",
    metadata,
    Column("group_id", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    # The committed offset the record precedes (the record's own offset + 1).
    Column("offset", BigInteger, nullable=False),
    # The record's timestamp, milliseconds since the epoch (Kafka's).
    Column("timestamp_ms", BigInteger, nullable=False),
    # The first 16 bytes of the SHA-256 of the record's key, value and headers (kafka_integration.fingerprints).
    Column("digest", LargeBinary, nullable=False),
)

# Log watermarks reported by clients, per (topic, partition), shared by all groups.
watermarks = Table(
    "watermarks",
    metadata,
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    # NULL: nobody observed it (a Spark batch sees log ends only; a Kafka client sees both).
    Column("log_start_offset", BigInteger, nullable=True),
    Column("log_end_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# The log ends seen over time, per (topic, partition): what lag in seconds interpolates
# (storage/lag.py). Written with each watermark report into a ring of slots per partition
# (a slot is a period of a few seconds), so a partition has a fixed number of rows at most;
# retention drops those of dropped watermarks (migration 0007). Only the key is indexed:
# overwriting a slot is a HOT update.
watermark_samples = Table(
    "watermark_samples",
    metadata,
    Column("topic", Text, primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("slot", SmallInteger, primary_key=True),
    Column("sampled_at", DateTime(timezone=True), nullable=False),
    Column("log_end_offset", BigInteger, nullable=False),
)

# The verdict of each large group (more partitions than one statement of its verdict reads,
# storage/kept_verdicts.py), evaluated over all its partitions by the maintenance round and
# kept here with when and under which status window: DescribeGroup's first page reads this
# row instead of judging every partition (issue 55). No foreign key: the maintenance drops
# the rows of groups deleted or no longer large.
group_verdicts = Table(
    "group_verdicts",
    metadata,
    Column("group_id", Text, primary_key=True),
    # The status window (seconds) the verdict was judged under: another window's is not used.
    Column("status_window", Float, nullable=False),
    Column("status", SmallInteger, nullable=False),
    Column("reason", Text, nullable=False),
    # The partitions judged.
    Column("partitions", Integer, nullable=False),
    # The evaluation's time (its first statement's): the verdict's age is counted from it.
    Column("evaluated_at", DateTime(timezone=True), nullable=False),
    # The group's reset count when it was evaluated: a reset or a delete since makes it unused.
    Column("reset_count", BigInteger, nullable=False),
)

# Secrets of the store, shared by every server on the database (migration 0006): the key
# that signs page tokens ("page_token_key").
secrets = Table(
    "secrets",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", LargeBinary, nullable=False),
)

# The SQL API's grants (migration 0011, docs/sql.md): what a database role may do to the
# groups whose id starts with group_prefix, as a tokens file's grants for a principal. The
# role is session_user, a name; text here, as the functions compare it. Written by the
# schema's owner (offsetstore.grant_groups / revoke_groups), read by the API's functions.
sql_grants = Table(
    "sql_grants",
    metadata,
    Column("role", Text, primary_key=True),
    Column("group_prefix", Text, primary_key=True),
    Column("access", Text, nullable=False),
    CheckConstraint("access IN ('read', 'commit', 'admin')", name="access_valid"),
)

# The SQL API's quotas per role (offsetstore.set_quotas): a tokens file's max_groups and
# max_partitions; 0 is no quota, as is no row. history_rows_per_second (migration 0012,
# offsetstore.set_history_budget) is its history budget, the server's default for a new row.
sql_quotas = Table(
    "sql_quotas",
    metadata,
    Column("role", Text, primary_key=True),
    Column("max_groups", Integer, nullable=False, server_default="0"),
    Column("max_partitions", Integer, nullable=False, server_default="0"),
    Column("history_rows_per_second", Integer, nullable=False, server_default="1000"),
    CheckConstraint("max_groups >= 0 AND max_partitions >= 0", name="quotas_non_negative"),
    CheckConstraint("history_rows_per_second >= 0", name="history_budget_non_negative"),
)

# What each SQL API commit of a role under a history budget charged (migration 0012): the
# budget's window is the last 10 s of these; api_check_history removes the expired ones.
sql_history_charges = Table(
    "sql_history_charges",
    metadata,
    Column("role", Text, nullable=False),
    Column("charged_at", DateTime(timezone=True), nullable=False),
    Column("rows", Integer, nullable=False),
    Index(None, "role", "charged_at"),
)
