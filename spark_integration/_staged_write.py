"""The executors' write path, driver side: the tasks stage a batch, then one transaction moves its rows and commits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psycopg import sql
from sqlalchemy import Connection

from offsetstore import storage
from offsetstore.core.errors import StaleGenerationError
from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.sink import sql as sink_sql
from offsetstore.sink.batch_write import BatchOutcome, PartitionStats, commit_next_offsets
from offsetstore.sink.sql import TableName
from offsetstore.spark_integration import _faults
from offsetstore.spark_integration._fingerprints import committed_only
from offsetstore.storage import engine as store_engine
from offsetstore.storage.clusters import write_fingerprints

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from offsetstore.spark_integration.sink import ExactlyOnceSink


def write_from_executors(
    sink: ExactlyOnceSink,
    conn: Connection,
    frame: DataFrame,
    columns: list[str],
    batch_id: int,
    *,
    generation: int,
    actor: str,
    metadata: str,
    fingerprints: Mapping[TopicPartition, RecordFingerprint] | None = None,
) -> BatchOutcome:
    """Writes the batch through the staging table: the tasks COPY in parallel, the driver moves and commits.

    The staging table is (re)created first, under the group's lock so that a fenced
    run spends no job; the move then skips the rows below their partition's stored
    offset, checks the staged rows against what the tasks reported, and commits
    ``max(offset) + 1`` per partition in the same transaction, with the ``fingerprints`` of those offsets.
    """
    import pyarrow.compute as pc

    from offsetstore.sink import arrow_copy
    from offsetstore.spark_integration import _staging

    stage = sink.staging_table
    with conn.begin():
        # A fenced run must not spend a job on rows it can never commit.
        storage.lock_offsets(conn, sink.group_id, generation=generation)
        with conn.connection.driver_connection.cursor() as cur:
            cur.execute(sink_sql.create_staging(stage, sink.table, columns))
    names = frame.columns
    job = _staging.StageJob(
        conninfo=store_engine.libpq_conninfo(sink.database_url, application_name="offsetstore-spark-stage"),
        settings=store_engine.SessionSettings(sink.statement_timeout_ms, sink.lock_timeout_ms).sql(),
        stage=stage,
        columns=tuple(columns),
        coordinates=(names.index("topic"), names.index("partition"), names.index("offset")),
        generation=generation,
        batch_id=batch_id,
    )
    try:
        positional = frame.toDF(*(f"_{i}" for i in range(len(names))))
        summary = positional.mapInArrow(_staging.task_function(job), _staging.SUMMARY_SCHEMA).toArrow()
    except Exception as error:
        # A newer run drops this run's staging table when it joins; say so, not
        # whatever that did to the tasks.
        _raise_if_stale(conn, sink.group_id, generation, error)
        raise
    _faults.at("staged", batch_id)

    stats: dict[TopicPartition, PartitionStats] = {}
    for t, p, lo, hi, n in zip(
        *(summary[c].to_pylist() for c in ("topic", "partition", "min_offset", "max_offset", "rows")), strict=True
    ):
        arrow_copy.merge_stats(stats, {TopicPartition(t, p): PartitionStats(lo, hi, n)})
    if not stats:
        return BatchOutcome(0, 0, 0)
    per_task = summary.group_by("task").aggregate([("rows", "sum")])
    expected = dict(zip(per_task["task"].to_pylist(), pc.cast(per_task["rows_sum"], "int64").to_pylist(), strict=True))
    received = sum(expected.values())

    with conn.begin():
        stored = storage.lock_offsets(conn, sink.group_id, generation=generation)
        # The partitions with rows below their stored offset (a sentinel skips nothing).
        behind = sink_sql.skip_below(stats, stored)
        with conn.connection.driver_connection.cursor() as cur:
            # Unless rows are skipped or merged, the INSERT's row count checks the
            # staged rows against what the tasks reported, without a scan of its own.
            counted = sink.mode == "append" and not behind
            if not counted:
                _check_staged(cur, stage, generation, batch_id, expected)
            params = {
                "topics": [tp.topic for tp in behind],
                "partitions": [tp.partition for tp in behind],
                "offsets": list(behind.values()),
                "generation": generation,
                "batch": batch_id,
            }
            skipped = _count_behind(cur, stage, params) if behind else 0
            cur.execute(
                sink_sql.move_rows(
                    sink.table,
                    _staged_source(stage),
                    columns,
                    where=_STAGED_AND_FRESH,
                    key_columns=sink.key_columns,
                ),
                params,
            )
            if counted and cur.rowcount != received:
                _check_staged(cur, stage, generation, batch_id, expected)  # raises, with the details
            # The table is this group's alone and every row in it is now moved or garbage.
            cur.execute(sql.SQL("TRUNCATE {}").format(stage.ident()))
        committed = commit_next_offsets(
            conn,
            stats,
            stored,
            group_id=sink.group_id,
            generation=generation,
            actor=actor,
            metadata=metadata,
        )
        write_fingerprints(conn, sink.group_id, committed_only(fingerprints, committed))
        _faults.at("in_transaction", batch_id)
    return BatchOutcome(received, received - skipped, skipped, stats, committed)


def drop_staging(conn: Connection, stage: TableName) -> None:
    """Drops the staging table, in the transaction where a run joins the group.

    Rows staged by earlier runs can never be committed now (their generation is
    stale): this is where a crashed run's leftovers go.
    """
    with conn.connection.driver_connection.cursor() as cur:
        if cur.execute("SELECT to_regclass(%s)", (stage.regclass(),)).fetchone()[0]:
            cur.execute(sql.SQL("DROP TABLE {}").format(stage.ident()))


def _staged_source(stage: TableName) -> sql.Composed:
    """The staged rows, each with its partition's stored offset where rows must be skipped."""
    return sql.SQL(
        "{stage} AS s LEFT JOIN unnest({t}::text[], {p}::integer[], {o}::bigint[]) AS d(topic, partition, next_offset) "
        "ON d.topic = s.{topic} AND d.partition = s.{partition}"
    ).format(
        stage=stage.ident(),
        t=sql.Placeholder("topics"),
        p=sql.Placeholder("partitions"),
        o=sql.Placeholder("offsets"),
        topic=sql.Identifier(sink_sql.TOPIC),
        partition=sql.Identifier(sink_sql.PARTITION),
    )


def _count_behind(cur: Any, stage: TableName, params: Mapping[str, Any]) -> int:
    """Staged rows of this batch below their partition's stored offset: the replayed ones."""
    statement = sql.SQL("SELECT count(*) FROM {source} WHERE {staged} AND NOT {fresh}").format(
        source=_staged_source(stage), staged=_STAGED, fresh=sink_sql.FRESH
    )
    return cur.execute(statement, params).fetchone()[0]


def _check_staged(cur: Any, stage: TableName, generation: int, batch_id: int, expected: Mapping[int, int]) -> None:
    found = dict(
        cur.execute(
            sql.SQL("SELECT {task}, count(*) FROM {stage} WHERE {gen} = %s AND {batch} = %s GROUP BY {task}").format(
                task=sql.Identifier(sink_sql.TASK),
                stage=stage.ident(),
                gen=sql.Identifier(sink_sql.GENERATION),
                batch=sql.Identifier(sink_sql.BATCH),
            ),
            (generation, batch_id),
        ).fetchall()
    )
    if found != expected:
        raise RuntimeError(
            f"staging table {stage} does not hold what the tasks staged for batch {batch_id} "
            f"(rows per task: found {found}, expected {expected}); was it changed from outside the sink?"
        )


def _raise_if_stale(conn: Connection, group_id: str, generation: int, error: BaseException) -> None:
    try:
        with conn.begin():
            storage.lock_offsets(conn, group_id, generation=generation)
    except StaleGenerationError as stale:
        raise stale from error


# Staged rows of this run's batch, and of those the ones at or above their partition's stored offset.
_STAGED = sql.SQL("s.{gen} = %(generation)s AND s.{batch} = %(batch)s").format(
    gen=sql.Identifier(sink_sql.GENERATION), batch=sql.Identifier(sink_sql.BATCH)
)
_STAGED_AND_FRESH = sql.SQL("{staged} AND {fresh}").format(staged=_STAGED, fresh=sink_sql.FRESH)
