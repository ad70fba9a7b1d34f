"""The executors' half of the parallel write path: each task COPYs its partition into the staging table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from psycopg import sql

from offsetstore.sink import arrow_copy
from offsetstore.sink import sql as sink_sql
from offsetstore.sink.sql import TableName
from offsetstore.spark_integration import _faults

#: What each task returns to the driver: per Kafka partition it staged, the offsets and rows.
SUMMARY_SCHEMA = "task int, topic string, partition int, min_offset long, max_offset long, rows long"

_SUMMARY_ARROW = pa.schema(
    [
        ("task", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("rows", pa.int64()),
    ]
)


@dataclass(frozen=True)
class StageJob:
    """Everything a staging task needs; small and picklable, shipped to every task."""

    # libpq string of the store's database, and the store's per-transaction settings (engine.py).
    conninfo: str
    settings: str
    stage: TableName
    # The table's names of the batch's first len(columns) columns; the batch columns
    # themselves go by position (Spark's mapInArrow mangles names with backticks).
    columns: tuple[str, ...]
    # Positions of the topic, partition and offset columns in the batch.
    coordinates: tuple[int, int, int]
    generation: int
    batch_id: int


def stage_partition(job: StageJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Replaces this task's rows of (generation, batch) in the staging table; yields its summary.

    Attempts of one task (a retry, a speculative copy) serialize on an advisory lock and
    each deletes what an earlier attempt committed before copying, so the staging table
    ends up with exactly one attempt's rows, whichever finished last.
    """
    import psycopg
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    first = next(batches, None)
    if first is None:
        return
    stats: dict = {}
    constants = {
        sink_sql.GENERATION: pa.scalar(job.generation, pa.int64()),
        sink_sql.BATCH: pa.scalar(job.batch_id, pa.int64()),
        sink_sql.TASK: pa.scalar(task, pa.int32()),
    }

    def staged_rows() -> Iterator[pa.RecordBatch]:
        batch = first
        while batch is not None:
            if batch.num_rows:
                coords = [batch.column(i) for i in job.coordinates]
                kafka = pa.RecordBatch.from_arrays(coords, names=list(sink_sql.COORDINATES))
                arrow_copy.check_coordinates(kafka)
                arrow_copy.merge_stats(stats, arrow_copy.partition_stats(kafka))
                rows = pa.RecordBatch.from_arrays(
                    coords + [batch.column(i) for i in range(len(job.columns))],
                    names=[sink_sql.TOPIC, sink_sql.PARTITION, sink_sql.OFFSET, *job.columns],
                )
                yield arrow_copy.with_constants(rows, constants)
            batch = next(batches, None)

    lock_key = f"offsetstore-stage/{job.stage}/{job.generation}/{job.batch_id}/{task}"
    with psycopg.connect(job.conninfo, prepare_threshold=None) as conn:
        with conn.cursor() as cur:
            cur.execute(job.settings)
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock_key,))
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s AND {} = %s").format(
                    job.stage.ident(),
                    sql.Identifier(sink_sql.GENERATION),
                    sql.Identifier(sink_sql.BATCH),
                    sql.Identifier(sink_sql.TASK),
                ),
                (job.generation, job.batch_id, task),
            )
            arrow_copy.copy_batches(
                cur, sink_sql.copy_into(job.stage, [*sink_sql.STAGING_PREFIX, *job.columns]), staged_rows()
            )
        _faults.at_task("task_copied", task, attempt)
    # Leaving the connection's block committed the task's rows.
    _faults.at_task("task_staged", task, attempt)
    if not stats:
        return
    keys = sorted(stats)
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([task] * len(keys), pa.int32()),
            pa.array([k.topic for k in keys], pa.string()),
            pa.array([k.partition for k in keys], pa.int32()),
            pa.array([stats[k].min_offset for k in keys], pa.int64()),
            pa.array([stats[k].max_offset for k in keys], pa.int64()),
            pa.array([stats[k].rows for k in keys], pa.int64()),
        ],
        schema=_SUMMARY_ARROW,
    )


def task_function(job: StageJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function for ``DataFrame.mapInArrow``: a plain closure, which Spark pickles with the job.

    It carries the fault hooks a test installed on the driver (none otherwise), for the tasks to arm.
    """
    hooks = _faults.shipped()

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        _faults.arm(hooks)
        return stage_partition(job, batches)

    return stage
