"""Exactly-once write of one batch: its rows and its offsets in the caller's transaction, for every sink.

The Spark sink and the Kafka consumer's writer both call :func:`deliver_batch`, so the
rule that makes them exactly once exists once: under the group's lock (which checks
the writer's generation), rows below their partition's stored offset were delivered
before and are skipped, the rest are written, and ``max(offset) + 1`` of each
partition is committed through the storage core, all in one transaction.

pyarrow is imported when a batch is written, not with this module.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from psycopg import sql
from sqlalchemy import Connection

from offsetstore import storage
from offsetstore.core.types import Mode, OffsetCommit, TopicPartition
from offsetstore.sink import sql as sink_sql
from offsetstore.sink.sql import PartitionStats, TableName

if TYPE_CHECKING:
    import pyarrow as pa
    from prometheus_client import CollectorRegistry, Counter

__all__ = [
    "BatchOutcome",
    "PartitionStats",
    "SinkMetrics",
    "SinkTarget",
    "TableName",
    "commit_next_offsets",
    "sink_metrics",
    "deliver_batch",
]

# An upsert's rows go through this per-transaction table (ON COMMIT DROP, dropped after use).
_BATCH_TABLE = sql.Identifier("_offsetstore_batch")


def column_names(values: Iterable[str], what: str) -> tuple[str, ...]:
    """``values`` as a tuple of distinct, non-empty column names, or ValueError/TypeError naming ``what``."""
    if isinstance(values, str):
        raise TypeError(f"{what} must be a sequence of column names, not a string")
    names = tuple(values)
    if any(not isinstance(n, str) or not n for n in names):
        raise ValueError(f"{what} must be non-empty strings")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} name a column twice")
    return names


@dataclass(frozen=True)
class SinkTarget:
    """Where and how a batch's rows are written.

    ``columns`` None writes every column of the rows (``topic``, ``partition`` and
    ``offset`` included), and none that the rows do not carry. ``mode="upsert"``
    inserts or, on a conflict on ``key_columns``, updates the other written columns;
    the table needs a unique index or constraint on exactly the key columns.
    """

    table: TableName
    mode: Mode = "append"
    key_columns: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # Accept what users write (a dotted name, lists) and keep the frozen value canonical.
        object.__setattr__(self, "table", TableName.parse(self.table))
        if self.mode not in ("append", "upsert"):
            raise ValueError(f"mode must be 'append' or 'upsert', not {self.mode!r}")
        keys = column_names(self.key_columns, "key_columns")
        object.__setattr__(self, "key_columns", keys)
        if self.mode == "upsert" and not keys:
            raise ValueError("mode='upsert' needs key_columns")
        if self.mode == "append" and keys:
            raise ValueError("key_columns are only for mode='upsert'")
        if self.columns is not None:
            columns = column_names(self.columns, "columns")
            if not columns:
                raise ValueError("columns must name at least one column")
            if missing := [k for k in keys if k not in columns]:
                raise ValueError(f"key_columns {missing} are not among the written columns")
            object.__setattr__(self, "columns", columns)

    def written_columns(self, names: Sequence[str]) -> list[str]:
        """The columns written from rows that have ``names``; ValueError when the rows cannot serve them."""
        if len(set(names)) != len(names):
            raise ValueError(f"the batch has duplicate column names: {list(names)}")
        if missing := [c for c in sink_sql.COORDINATES if c not in names]:
            raise ValueError(f"the batch has no {', '.join(missing)} column: it must carry the Kafka source's columns")
        if self.columns is None:
            if missing := [k for k in self.key_columns if k not in names]:
                raise ValueError(f"key_columns {missing} are not columns of the batch")
            return list(names)
        if missing := [c for c in self.columns if c not in names]:
            raise ValueError(f"columns {missing} are not columns of the batch")
        return list(self.columns)


@dataclass(frozen=True)
class BatchOutcome:
    """What :func:`deliver_batch` did with one batch."""

    #: Rows received.
    rows: int
    #: Rows written to the table (for an upsert: rows applied, before merging equal keys).
    written: int
    #: Rows below their partition's stored offset: delivered before, not written again.
    skipped: int
    #: Per partition of the batch: its offsets and rows.
    partitions: dict[TopicPartition, PartitionStats] = field(default_factory=dict)
    #: Offsets committed, ``max(offset) + 1``; a partition whose stored offset was higher is left alone.
    committed: dict[TopicPartition, int] = field(default_factory=dict)


def commit_next_offsets(
    conn: Connection,
    stats: Mapping[TopicPartition, PartitionStats],
    stored: Mapping[TopicPartition, int],
    *,
    group_id: str,
    generation: int,
    actor: str,
    metadata: str = "",
) -> dict[TopicPartition, int]:
    """Commits ``max(offset) + 1`` of each partition of ``stats`` that moves its offset forward.

    ``stored`` is what :func:`storage.lock_offsets` returned in this transaction. A
    replayed batch below the stored offset leaves it alone (never backwards); a stored
    sentinel (-2, -1) is replaced.
    """
    commits = []
    for tp in sorted(stats):
        next_offset = stats[tp].max_offset + 1
        have = stored.get(tp)
        if have is None or have < 0 or next_offset > have:
            commits.append(OffsetCommit(tp.topic, tp.partition, next_offset, metadata))
    if commits:
        storage.commit_offsets(conn, group_id, commits, generation=generation, actor=actor)
    return {TopicPartition(c.topic, c.partition): c.offset for c in commits}


def deliver_batch(
    conn: Connection,
    target: SinkTarget,
    rows: pa.Table | Iterable[pa.RecordBatch],
    *,
    group_id: str,
    generation: int,
    actor: str,
    metadata: str = "",
) -> BatchOutcome:
    """Writes one batch and commits its offsets inside the caller's transaction, exactly once.

    Locks the group and checks ``generation`` (:class:`StaleGenerationError`; 0 is
    unfenced), skips rows whose offset is below their partition's stored offset (a
    stored sentinel -2/-1 skips nothing), writes the rest (COPY for append; a batch
    table and ``INSERT ... ON CONFLICT`` for upsert), and commits ``max(offset) + 1``
    per partition with :func:`storage.commit_offsets`. The caller commits the
    transaction, or rolls it back on any error: then nothing is written.

    ``rows`` is a pyarrow Table or an iterable of RecordBatches (a RecordBatchReader
    streams), carrying ``topic`` (string), ``partition`` (int32) and ``offset``
    (int64) plus the target's columns. Batches are consumed one at a time, after the
    lock is taken, so an iterator is never held whole in memory.
    """
    # pyarrow and numpy are the writers' extras: importing this module must not need them.
    import pyarrow as pa

    from offsetstore.sink import arrow_copy

    stored = storage.lock_offsets(conn, group_id, generation=generation)
    batches: Iterator[pa.RecordBatch]
    if isinstance(rows, pa.Table):
        schema, batches = rows.schema, iter(rows.to_batches())
    else:
        batches = iter(rows)
        schema = getattr(rows, "schema", None)
        if schema is None:
            first = next(batches, None)
            if first is None:
                return BatchOutcome(0, 0, 0)
            schema, batches = first.schema, itertools.chain([first], batches)
    names = list(schema.names)
    columns = target.written_columns(names)
    stats: dict[TopicPartition, PartitionStats] = {}
    tally = {"rows": 0, "written": 0}

    def fresh() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.schema.names != names:
                raise ValueError(f"the batch's record batches differ in columns: {batch.schema.names} after {names}")
            if not batch.num_rows:
                continue
            arrow_copy.check_coordinates(batch)
            seen = arrow_copy.partition_stats(batch)
            arrow_copy.merge_stats(stats, seen)
            kept = arrow_copy.skip_delivered(batch, seen, stored)
            tally["rows"] += batch.num_rows
            tally["written"] += kept.num_rows
            if kept.num_rows:
                yield kept

    # Rows are skipped here, in Arrow, rather than in SQL: an append then COPYs straight
    # into the target, where a staging detour would write every row twice to skip,
    # usually, none. Peeking spares a replay that skips everything its COPY.
    pending = fresh()
    head = next(pending, None)
    if head is not None:
        with conn.connection.driver_connection.cursor() as cur:
            if target.mode == "append":
                arrow_copy.copy_batches(
                    cur,
                    sink_sql.copy_into(target.table, columns),
                    (b.select(columns) for b in itertools.chain([head], pending)),
                )
            else:
                _upsert(cur, target, columns, itertools.chain([head], pending))
    committed = commit_next_offsets(
        conn, stats, stored, group_id=group_id, generation=generation, actor=actor, metadata=metadata
    )
    rows_in, written = tally["rows"], tally["written"]
    return BatchOutcome(rows_in, written, rows_in - written, stats, committed)


def _upsert(cur, target: SinkTarget, columns: list[str], batches: Iterator[pa.RecordBatch]) -> None:
    import pyarrow as pa

    from offsetstore.sink import arrow_copy

    names = [sink_sql.OFFSET, *columns]
    cur.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(_BATCH_TABLE))
    cur.execute(sink_sql.create_batch_table(_BATCH_TABLE, target.table, columns))
    arrow_copy.copy_batches(
        cur,
        sink_sql.copy_into(_BATCH_TABLE, names),
        (
            pa.RecordBatch.from_arrays([b.column("offset"), *(b.column(c) for c in columns)], names=names)
            for b in batches
        ),
    )
    cur.execute(
        sink_sql.move_rows(
            target.table,
            sql.SQL("{} AS s").format(_BATCH_TABLE),
            columns,
            where=sql.SQL("true"),
            key_columns=target.key_columns,
        )
    )
    # Gone now rather than at COMMIT: the same transaction may write another batch.
    cur.execute(sql.SQL("DROP TABLE {}").format(_BATCH_TABLE))


# --- metrics ---------------------------------------------------------------------


@dataclass(frozen=True)
class SinkMetrics:
    """Counters of what a process's sinks wrote and skipped, by group."""

    batches: Counter
    written: Counter
    skipped: Counter

    def observe(self, group_id: str, outcome: BatchOutcome) -> None:
        """Counts one batch's outcome; call it once the batch's transaction committed."""
        self.batches.labels(group_id).inc()
        self.written.labels(group_id).inc(outcome.written)
        self.skipped.labels(group_id).inc(outcome.skipped)


_metrics: weakref.WeakKeyDictionary[CollectorRegistry, SinkMetrics] = weakref.WeakKeyDictionary()
_metrics_lock = threading.Lock()


def sink_metrics(registry: CollectorRegistry | None = None) -> SinkMetrics:
    """The sink counters in ``registry`` (default: prometheus_client's REGISTRY), registered once per registry.

    ``offsetstore_sink_rows_skipped_total`` growing is the sign of a replay: a query
    restarted without its checkpoint re-reads data that was delivered.
    """
    from prometheus_client import REGISTRY, Counter

    registry = REGISTRY if registry is None else registry
    with _metrics_lock:
        found = _metrics.get(registry)
        if found is None:
            found = SinkMetrics(
                Counter("offsetstore_sink_batches_total", "Batches a sink committed.", ["group"], registry=registry),
                Counter(
                    "offsetstore_sink_rows_written_total",
                    "Rows a sink wrote to its table.",
                    ["group"],
                    registry=registry,
                ),
                Counter(
                    "offsetstore_sink_rows_skipped_total",
                    "Rows a sink skipped because their offsets were already committed (a replay).",
                    ["group"],
                    registry=registry,
                ),
            )
            _metrics[registry] = found
        return found
