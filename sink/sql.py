"""Names and statements of a sink's target, staging and batch tables, quoted with psycopg.sql, and the skip rule.

Shared by the exactly-once writers (:mod:`offsetstore.sink.batch_write`, the Spark
sink's staging path): one place decides how a table name parses and quotes, and which
rows of a batch were delivered before (:func:`skip_below`, :data:`FRESH`, :func:`fresh_rows`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg import sql

from offsetstore.core.types import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

# Columns of the staging and batch tables that are not the user's. The prefix keeps them
# apart from anything a sink table may have; Kafka's own `offset` and `partition` stay
# ordinary user columns.
GENERATION = "_offsetstore_generation"
BATCH = "_offsetstore_batch"
TASK = "_offsetstore_task"
TOPIC = "_offsetstore_topic"
PARTITION = "_offsetstore_partition"
OFFSET = "_offsetstore_offset"

#: The Kafka source's columns every batch must carry.
COORDINATES = ("topic", "partition", "offset")

# PostgreSQL cuts identifiers at 63 bytes; staging names are built to fit.
_MAX_IDENTIFIER = 63


@dataclass(frozen=True)
class TableName:
    """A table, optionally schema-qualified; an unqualified one is found through search_path."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, table: str | tuple[str, str] | TableName) -> TableName:
        """``"orders"``, ``"public.orders"``, or ``("my.schema", "my.table")`` for names with dots."""
        if isinstance(table, TableName):
            return table
        if isinstance(table, tuple):
            schema, name = table
            return cls(schema, name)
        if not isinstance(table, str) or not table:
            raise ValueError(f"table must be a non-empty name, got {table!r}")
        parts = table.split(".")
        if len(parts) == 1:
            return cls(None, table)
        if len(parts) == 2 and all(parts):
            return cls(parts[0], parts[1])
        raise ValueError(f"table {table!r}: give a dotted name as a (schema, table) tuple")

    def ident(self) -> sql.Identifier:
        """The name quoted for psycopg.sql."""
        return sql.Identifier(self.name) if self.schema is None else sql.Identifier(self.schema, self.name)

    def regclass(self) -> str:
        """The name as to_regclass() takes it."""
        return self.ident().as_string(None)

    def __str__(self) -> str:
        return self.name if self.schema is None else f"{self.schema}.{self.name}"


def staging_name(target: TableName, group_id: str) -> TableName:
    """The staging table of one (target, group): beside the target, readable, and unique by hash."""
    digest = hashlib.sha256(f"{target}\x00{group_id}".encode()).hexdigest()[:12]
    suffix = f"_offsetstore_stage_{digest}"
    stem = target.name.encode()[: _MAX_IDENTIFIER - len(suffix)].decode(errors="ignore")
    return TableName(target.schema, stem + suffix)


def idents(names: Sequence[str]) -> sql.Composed:
    """Column names, quoted and comma-separated."""
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def copy_into(table: TableName | sql.Identifier, columns: Sequence[str]) -> sql.Composed:
    """``COPY table (columns) FROM STDIN`` in the CSV format that :mod:`.arrow_copy` writes."""
    ident = table.ident() if isinstance(table, TableName) else table
    return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(ident, idents(columns))


def create_staging(stage: TableName, target: TableName, columns: Sequence[str]) -> sql.Composed:
    """An UNLOGGED copy of the written columns' types, plus who wrote each row and its Kafka coordinates.

    UNLOGGED: staged rows are rewritten into the target inside the transaction that
    commits the offsets, so they need no WAL of their own; a crash only loses rows that
    were never acknowledged.
    """
    return sql.SQL(
        "CREATE UNLOGGED TABLE IF NOT EXISTS {stage} AS SELECT "
        "NULL::bigint AS {gen}, NULL::bigint AS {batch}, NULL::integer AS {task}, "
        "NULL::text AS {topic}, NULL::integer AS {partition}, NULL::bigint AS {offset}, {cols} "
        "FROM {target} WITH NO DATA"
    ).format(
        stage=stage.ident(),
        gen=sql.Identifier(GENERATION),
        batch=sql.Identifier(BATCH),
        task=sql.Identifier(TASK),
        topic=sql.Identifier(TOPIC),
        partition=sql.Identifier(PARTITION),
        offset=sql.Identifier(OFFSET),
        cols=idents(columns),
        target=target.ident(),
    )


#: Columns a staging COPY writes, before the user's.
STAGING_PREFIX = (GENERATION, BATCH, TASK, TOPIC, PARTITION, OFFSET)


def create_batch_table(name: sql.Identifier, target: TableName, columns: Sequence[str]) -> sql.Composed:
    """An upsert's per-transaction table: the written columns and the offset."""
    return sql.SQL(
        "CREATE TEMPORARY TABLE {name} ON COMMIT DROP AS SELECT NULL::bigint AS {offset}, {cols} "
        "FROM {target} WITH NO DATA"
    ).format(name=name, offset=sql.Identifier(OFFSET), cols=idents(columns), target=target.ident())


def move_rows(
    target: TableName,
    source: sql.Composable,
    columns: Sequence[str],
    *,
    where: sql.Composable,
    key_columns: Sequence[str] = (),
) -> sql.Composed:
    """INSERT ... SELECT from a staging or batch table; with ``key_columns``, an upsert.

    An upsert keeps one row per key, the one with the highest offset: ON CONFLICT may
    not touch a row twice in one statement, and within a Kafka partition (where one key
    lives) the higher offset is the newer record.
    """
    cols = idents(columns)
    src = sql.SQL(", ").join(sql.Identifier("s", c) for c in columns)
    if not key_columns:
        return sql.SQL("INSERT INTO {target} ({cols}) SELECT {src} FROM {source} WHERE {where}").format(
            target=target.ident(), cols=cols, src=src, source=source, where=where
        )
    keys = sql.SQL(", ").join(sql.Identifier("s", c) for c in key_columns)
    others = [c for c in columns if c not in key_columns]
    if others:
        action = sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)
        )
    else:
        action = sql.SQL("DO NOTHING")
    return sql.SQL(
        "INSERT INTO {target} AS t ({cols}) "
        "SELECT DISTINCT ON ({keys}) {src} FROM {source} WHERE {where} "
        "ORDER BY {keys}, {offset} DESC "
        "ON CONFLICT ({conflict}) {action}"
    ).format(
        target=target.ident(),
        cols=cols,
        keys=keys,
        src=src,
        source=source,
        where=where,
        offset=sql.Identifier("s", OFFSET),
        conflict=idents(key_columns),
        action=action,
    )


# --- the skip rule: what a batch holds that was delivered before ------------------
#
# Under the group's lock (storage.lock_offsets) a sink learns each partition's stored next
# offset. A row below it was written, and its offset committed, by an earlier attempt
# (a replay, a retried batch): the row is skipped. A stored sentinel (-2 earliest, -1
# latest, left by a reset with no known watermark) says nothing about what was delivered
# and skips nothing. The batch write applies the rule to Arrow data before its COPY, the
# Spark executors' path in SQL as it moves staged rows: both renderings are below, built
# from one threshold map and one comparison ("no threshold, or offset >= threshold").


@dataclass(frozen=True)
class PartitionStats:
    """What one batch holds of one Kafka partition."""

    min_offset: int
    max_offset: int
    rows: int


def skip_below(
    stats: Mapping[TopicPartition, PartitionStats], stored: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """The partitions of a batch that hold delivered rows, each with the offset below which rows were delivered.

    ``stats`` holds the batch's lowest offset per partition; ``stored`` is what
    ``storage.lock_offsets`` returned. Empty: the batch skips nothing.
    """
    return {tp: stored[tp] for tp, s in stats.items() if stored.get(tp, -1) > s.min_offset}


#: The rule in SQL: staged row ``s`` was not delivered. ``d`` is :func:`skip_below` unnested
#: as ``d(topic, partition, next_offset)`` and LEFT JOINed: NULL where the partition skips nothing.
FRESH = sql.SQL("(d.next_offset IS NULL OR s.{offset} >= d.next_offset)").format(offset=sql.Identifier(OFFSET))


def fresh_rows(data: pa.Table | pa.RecordBatch, below: Mapping[TopicPartition, int]) -> Any:
    """The rule in Arrow: a boolean mask, true for each row of ``data`` that was not delivered.

    ``below`` is :func:`skip_below`'s map; each row gets its partition's threshold
    (null where there is none) and the comparison is :data:`FRESH`'s.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    next_offset = pa.nulls(data.num_rows, pa.int64())
    for (topic, partition), offset in below.items():
        mine = pc.and_(pc.equal(data["topic"], topic), pc.equal(data["partition"], partition))
        next_offset = pc.if_else(mine, pa.scalar(offset, pa.int64()), next_offset)
    return pc.or_kleene(pc.is_null(next_offset), pc.greater_equal(data["offset"], next_offset))
