"""The exactly-once foreachBatch sink: a micro-batch's rows and its offsets in one PostgreSQL transaction."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy
from psycopg import sql
from sqlalchemy import Connection, Engine
from sqlalchemy.pool import NullPool

from offsetstore.client.errors import StaleGenerationError
from offsetstore.client.types import OffsetCommit, TopicPartition, Watermark
from offsetstore.server import storage
from offsetstore.server.migrate import normalize_url

from . import _sql
from ._sql import TableName

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from ._arrow import PartitionStats

__all__ = ["ExactlyOnceSink", "Mode", "WritePath"]

log = logging.getLogger("offsetstore.spark_integration")

Mode = Literal["append", "upsert"]
WritePath = Literal["auto", "driver", "executors"]

_BATCH_TABLE = sql.Identifier("_offsetstore_batch")


@dataclass
class _Run:
    """The sink's hold on the group for one run of the query."""

    key: tuple[str, str] | None
    generation: int
    member: str


class ExactlyOnceSink:
    """A ``foreachBatch`` function that writes each micro-batch and its offsets in one transaction.

    Parameters
    ----------
    database_url : str
        The PostgreSQL database of the offset store (SQLAlchemy or libpq URL); the
        sink table lives in it too.
    group_id : str
        The consumer group whose offsets the query commits.
    table : str or tuple of (str, str)
        The sink table: ``"orders"``, ``"public.orders"``, or ``(schema, table)`` for
        names that contain dots.
    mode : {"append", "upsert"}, default "append"
        ``"append"`` inserts every new row. ``"upsert"`` inserts or, on a conflict on
        ``key_columns``, updates the other written columns.
    key_columns : sequence of str, optional
        The upsert's key; the table needs a unique index or constraint on exactly these
        columns. Required for, and only for, ``mode="upsert"``.
    columns : sequence of str, optional
        The batch columns to write, by name. Default: all of them. The batch must carry
        ``topic``, ``partition`` and ``offset`` in any case.
    write_path : {"auto", "driver", "executors"}, default "auto"
        ``"driver"`` collects the batch as Arrow and COPYs it inside the transaction.
        ``"executors"`` has every task COPY its partition into a staging table in
        parallel, and the transaction then moves the rows. ``"auto"`` takes the
        executors for a run's first batch (often a backlog of unknown size) and after a
        batch of more than ``executor_threshold`` rows, the driver otherwise.
    executor_threshold : int, default 200000
        Rows of the previous batch above which ``"auto"`` takes the executors.
    staging_table : str or tuple of (str, str), optional
        The staging table of the executors' path. Default: one beside ``table``, named
        after it and the group. It belongs to the sink: it is dropped and recreated.
    member_id : str, optional
        Recorded when the run joins the group and as the actor of its commits.
        Default: ``"spark:<run id>"``.
    report_watermarks : bool, default True
        Report each batch's log ends (from the query's progress and the batch) to the
        store, for DescribeGroup's lag and the lag metrics.

    Notes
    -----
    Call protocol. Each call writes one batch in one transaction: lock the group
    (checking the run's generation), drop the rows below their partition's stored
    offset, write the rest, commit ``max(offset) + 1`` per partition with the storage
    core's ``commit_offsets``, then COMMIT. Nothing is acknowledged to Spark before the
    COMMIT, and a replayed or retried batch finds its rows' offsets already stored, so
    every source record reaches the table exactly once, whatever the checkpoint says.
    A stored sentinel (-2 earliest, -1 latest, left by a reset to a boundary with no
    known watermark) skips nothing in its partition.

    Fencing. The first batch of each query run (Spark's ``runId``) joins the group,
    which moves its generation on; later commits carry that generation. A run that was
    superseded by a newer run of the group or by an operator's reset or delete raises
    :class:`offsetstore.client.StaleGenerationError` and writes nothing; the query
    then stops with that error.

    The object is small and picklable: database connections are opened inside the
    call, on the driver and, for the executors' path, in each task.

    ``_fault_hook``, off by default, is a test hook: a callable ``(stage, batch_id)``
    run at ``"start"``, ``"staged"`` (executors' path, rows staged),
    ``"in_transaction"`` (everything written, not yet committed) and ``"committed"``
    (committed, not yet returned to Spark). ``_task_fault_hook`` is its picklable
    counterpart in the staging tasks, called with ``(stage, task, attempt)``.

    Examples
    --------
    >>> sink = ExactlyOnceSink(url, group_id="orders-etl", table="public.orders")
    >>> start = starting_offsets(url, "orders-etl", {"orders": 12})
    >>> (spark.readStream.format("kafka").option("subscribe", "orders")
    ...     .option("startingOffsets", start).load()
    ...     .writeStream.foreachBatch(sink).option("checkpointLocation", path).start())
    """

    _fault_hook: Callable[[str, int], None] | None = None
    _task_fault_hook: Callable[[str, int, int], None] | None = None

    def __init__(
        self,
        database_url: str,
        group_id: str,
        table: str | tuple[str, str],
        *,
        mode: Mode = "append",
        key_columns: Sequence[str] = (),
        columns: Sequence[str] | None = None,
        write_path: WritePath = "auto",
        executor_threshold: int = 200_000,
        staging_table: str | tuple[str, str] | None = None,
        member_id: str | None = None,
        report_watermarks: bool = True,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group_id must be a non-empty string")
        if mode not in ("append", "upsert"):
            raise ValueError(f"mode must be 'append' or 'upsert', not {mode!r}")
        if write_path not in ("auto", "driver", "executors"):
            raise ValueError(f"write_path must be 'auto', 'driver' or 'executors', not {write_path!r}")
        key_columns = _names(key_columns, "key_columns")
        if mode == "upsert" and not key_columns:
            raise ValueError("mode='upsert' needs key_columns")
        if mode == "append" and key_columns:
            raise ValueError("key_columns are only for mode='upsert'")
        if columns is not None:
            columns = _names(columns, "columns")
            if not columns:
                raise ValueError("columns must name at least one column")
            if missing := [k for k in key_columns if k not in columns]:
                raise ValueError(f"key_columns {missing} are not among the written columns")
        if executor_threshold < 0:
            raise ValueError("executor_threshold must be >= 0")
        self.database_url = database_url
        self.group_id = group_id
        self.table = TableName.parse(table)
        self.mode: Mode = mode
        self.key_columns = key_columns
        self.columns = columns
        self.write_path: WritePath = write_path
        self.executor_threshold = executor_threshold
        self.staging_table = (
            TableName.parse(staging_table) if staging_table is not None else _sql.staging_name(self.table, group_id)
        )
        self.member_id = member_id
        self.report_watermarks = report_watermarks
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._engine: Engine | None = None
        self._run: _Run | None = None
        self._last_rows: int | None = None

    # Pickling ships the configuration only; connections and the run are per process.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_engine", "_run", "_last_rows"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self) -> str:
        # Not the URL: it may hold a password.
        return (
            f"ExactlyOnceSink(group_id={self.group_id!r}, table={str(self.table)!r}, mode={self.mode!r}, "
            f"write_path={self.write_path!r})"
        )

    @property
    def generation(self) -> int | None:
        """The generation the current run joined with; None before its first batch."""
        return self._run.generation if self._run else None

    # --- the call ----------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """Writes one micro-batch and commits its offsets, or raises and writes nothing.

        Parameters
        ----------
        batch_df : pyspark.sql.DataFrame
            The micro-batch, with the Kafka source's ``topic``, ``partition`` and
            ``offset`` columns.
        batch_id : int
            Spark's batch id; recorded in the commits' metadata.

        Raises
        ------
        offsetstore.client.StaleGenerationError
            The run was fenced by a newer run of the group, or by a reset or delete.
        """
        key = _query_run(batch_df)
        if self._run is not None and self._run.key != key:
            self._run, self._last_rows = None, None
        self._hook("start", batch_id)
        batch_columns = batch_df.columns
        columns = self._written_columns(batch_columns)
        needed = columns + [c for c in _sql.COORDINATES if c not in columns]
        frame = batch_df if needed == batch_columns else batch_df.select(*[_spark_column(c) for c in needed])
        # One connection for the whole call, closed at its end: nothing lingers between
        # batches, and each of the call's transactions is on it in turn.
        with self._get_engine().connect() as conn:
            if self._run is None:
                self._run = self._join(conn, key)
            path = self._choose_path()
            if path == "driver":
                stats = self._write_from_driver(conn, frame, columns, batch_id)
            else:
                stats = self._write_from_executors(conn, frame, columns, batch_id)
            self._last_rows = sum(s.rows for s in stats.values())
            log.debug(
                "batch committed",
                extra={"group_id": self.group_id, "batch_id": batch_id, "rows": self._last_rows, "path": path},
            )
            if self.report_watermarks and stats:
                self._report_watermarks(conn, stats, key)
        self._hook("committed", batch_id)

    def _hook(self, stage: str, batch_id: int) -> None:
        if self._fault_hook is not None:
            self._fault_hook(stage, batch_id)

    def _written_columns(self, batch_columns: Sequence[str]) -> list[str]:
        if len(set(batch_columns)) != len(batch_columns):
            raise ValueError(f"the batch has duplicate column names: {list(batch_columns)}")
        if missing := [c for c in _sql.COORDINATES if c not in batch_columns]:
            raise ValueError(f"the batch has no {', '.join(missing)} column: it must carry the Kafka source's columns")
        if self.columns is None:
            columns = list(batch_columns)
            if missing := [k for k in self.key_columns if k not in columns]:
                raise ValueError(f"key_columns {missing} are not columns of the batch")
            return columns
        if missing := [c for c in self.columns if c not in batch_columns]:
            raise ValueError(f"columns {missing} are not columns of the batch")
        return list(self.columns)

    def _get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = sqlalchemy.create_engine(
                normalize_url(self.database_url),
                poolclass=NullPool,
                connect_args={"application_name": "offsetstore-spark-sink"},
            )
        return self._engine

    def _join(self, conn: Connection, key: tuple[str, str] | None) -> _Run:
        member = self.member_id or (f"spark:{key[1]}" if key and key[1] else "spark")
        with conn.begin():
            generation = storage.join_group(conn, self.group_id, member)
            # Rows staged by earlier runs can never be committed now (their generation is
            # stale): this is where a crashed run's leftovers go.
            with conn.connection.driver_connection.cursor() as cur:
                if cur.execute("SELECT to_regclass(%s)", (self.staging_table.regclass(),)).fetchone()[0]:
                    cur.execute(sql.SQL("DROP TABLE {}").format(self.staging_table.ident()))
        log.info("joined group", extra={"group_id": self.group_id, "generation": generation, "member_id": member})
        return _Run(key, generation, member)

    def _choose_path(self) -> Literal["driver", "executors"]:
        if self.write_path != "auto":
            return self.write_path
        if self._last_rows is None or self._last_rows > self.executor_threshold:
            return "executors"
        return "driver"

    def _commit(
        self,
        conn: Connection,
        stats: Mapping[TopicPartition, PartitionStats],
        stored: Mapping[TopicPartition, int],
        batch_id: int,
    ) -> None:
        assert self._run is not None
        metadata = f"spark batch {batch_id}"
        commits = []
        for tp in sorted(stats):
            next_offset = stats[tp].max_offset + 1
            have = stored.get(tp)
            # Never backwards: a replayed batch below the stored offset leaves it alone.
            if have is None or have < 0 or next_offset > have:
                commits.append(OffsetCommit(tp.topic, tp.partition, next_offset, metadata))
        if commits:
            storage.commit_offsets(
                conn, self.group_id, commits, generation=self._run.generation, actor=self._run.member
            )

    # --- path (a): the driver COPYs the batch -------------------------------------

    def _write_from_driver(
        self, conn: Connection, frame: DataFrame, columns: list[str], batch_id: int
    ) -> dict[TopicPartition, PartitionStats]:
        from . import _arrow

        assert self._run is not None
        table = frame.toArrow()
        _arrow.check_coordinates(table)
        stats = _arrow.partition_stats(table)
        with conn.begin():
            stored = storage.lock_offsets(conn, self.group_id, generation=self._run.generation)
            # Filtering here rather than in SQL lets an append COPY straight into the
            # target: a staging detour would write every row twice to skip, usually, none.
            fresh = _arrow.skip_delivered(table, stats, stored)
            with conn.connection.driver_connection.cursor() as cur:
                if fresh.num_rows and self.mode == "append":
                    _arrow.copy_batches(cur, _sql.copy_into(self.table, columns), fresh.select(columns).to_batches())
                elif fresh.num_rows:
                    self._upsert_from_driver(cur, fresh, columns)
            self._commit(conn, stats, stored, batch_id)
            self._hook("in_transaction", batch_id)
        return stats

    def _upsert_from_driver(self, cur: Any, fresh: pa.Table, columns: list[str]) -> None:
        import pyarrow as pa

        from . import _arrow

        cur.execute(_sql.create_batch_table(_BATCH_TABLE, self.table, columns))
        data = pa.Table.from_arrays([fresh["offset"], *(fresh[c] for c in columns)], names=[_sql.OFFSET, *columns])
        _arrow.copy_batches(cur, _sql.copy_into(_BATCH_TABLE, [_sql.OFFSET, *columns]), data.to_batches())
        cur.execute(
            _sql.move_rows(
                self.table,
                sql.SQL("{} AS s").format(_BATCH_TABLE),
                columns,
                where=sql.SQL("true"),
                key_columns=self.key_columns,
            )
        )

    # --- path (b): the executors stage, the driver moves --------------------------

    def _write_from_executors(
        self, conn: Connection, frame: DataFrame, columns: list[str], batch_id: int
    ) -> dict[TopicPartition, PartitionStats]:
        import pyarrow.compute as pc

        from . import _arrow, _staging

        assert self._run is not None
        generation = self._run.generation
        with conn.begin():
            # A fenced run must not spend a job on rows it can never commit.
            storage.lock_offsets(conn, self.group_id, generation=generation)
            with conn.connection.driver_connection.cursor() as cur:
                cur.execute(_sql.create_staging(self.staging_table, self.table, columns))
        names = frame.columns
        job = _staging.StageJob(
            conninfo=_sql.conninfo(normalize_url(self.database_url)),
            stage=self.staging_table,
            columns=tuple(columns),
            coordinates=(names.index("topic"), names.index("partition"), names.index("offset")),
            generation=generation,
            batch_id=batch_id,
            fault_hook=self._task_fault_hook,
        )
        try:
            positional = frame.toDF(*(f"_{i}" for i in range(len(names))))
            summary = positional.mapInArrow(_staging.task_function(job), _staging.SUMMARY_SCHEMA).toArrow()
        except Exception as error:
            # A newer run drops this run's staging table when it joins; say so, not
            # whatever that did to the tasks.
            self._raise_if_stale(conn, error)
            raise
        self._hook("staged", batch_id)

        stats: dict[TopicPartition, PartitionStats] = {}
        for t, p, lo, hi, n in zip(
            *(summary[c].to_pylist() for c in ("topic", "partition", "min_offset", "max_offset", "rows")), strict=True
        ):
            _arrow.merge_stats(stats, {TopicPartition(t, p): _arrow.PartitionStats(lo, hi, n)})
        if not stats:
            return stats
        per_task = summary.group_by("task").aggregate([("rows", "sum")])
        expected = dict(
            zip(per_task["task"].to_pylist(), pc.cast(per_task["rows_sum"], "int64").to_pylist(), strict=True)
        )

        with conn.begin():
            stored = storage.lock_offsets(conn, self.group_id, generation=generation)
            with conn.connection.driver_connection.cursor() as cur:
                skip = {tp: off for tp, off in stored.items() if tp in stats and off >= 0}
                # Unless rows are skipped or merged, the INSERT's row count checks the
                # staged rows against what the tasks reported, without a scan of its own.
                counted = self.mode == "append" and all(off <= stats[tp].min_offset for tp, off in skip.items())
                if not counted:
                    self._check_staged(cur, generation, batch_id, expected)
                source = sql.SQL(
                    "{stage} AS s LEFT JOIN unnest({t}::text[], {p}::integer[], {o}::bigint[]) AS d(topic, partition, next_offset) "
                    "ON d.topic = s.{topic} AND d.partition = s.{partition}"
                ).format(
                    stage=self.staging_table.ident(),
                    t=sql.Placeholder("topics"),
                    p=sql.Placeholder("partitions"),
                    o=sql.Placeholder("offsets"),
                    topic=sql.Identifier(_sql.TOPIC),
                    partition=sql.Identifier(_sql.PARTITION),
                )
                where = sql.SQL(
                    "s.{gen} = {g} AND s.{batch} = {b} AND (d.next_offset IS NULL OR s.{offset} >= d.next_offset)"
                ).format(
                    gen=sql.Identifier(_sql.GENERATION),
                    batch=sql.Identifier(_sql.BATCH),
                    offset=sql.Identifier(_sql.OFFSET),
                    g=sql.Placeholder("generation"),
                    b=sql.Placeholder("batch"),
                )
                cur.execute(
                    _sql.move_rows(self.table, source, columns, where=where, key_columns=self.key_columns),
                    {
                        "topics": [tp.topic for tp in skip],
                        "partitions": [tp.partition for tp in skip],
                        "offsets": list(skip.values()),
                        "generation": generation,
                        "batch": batch_id,
                    },
                )
                if counted and cur.rowcount != sum(expected.values()):
                    self._check_staged(cur, generation, batch_id, expected)  # raises, with the details
                # The table is this group's alone and every row in it is now moved or garbage.
                cur.execute(sql.SQL("TRUNCATE {}").format(self.staging_table.ident()))
            self._commit(conn, stats, stored, batch_id)
            self._hook("in_transaction", batch_id)
        return stats

    def _check_staged(self, cur: Any, generation: int, batch_id: int, expected: Mapping[int, int]) -> None:
        found = dict(
            cur.execute(
                sql.SQL(
                    "SELECT {task}, count(*) FROM {stage} WHERE {gen} = %s AND {batch} = %s GROUP BY {task}"
                ).format(
                    task=sql.Identifier(_sql.TASK),
                    stage=self.staging_table.ident(),
                    gen=sql.Identifier(_sql.GENERATION),
                    batch=sql.Identifier(_sql.BATCH),
                ),
                (generation, batch_id),
            ).fetchall()
        )
        if found != expected:
            raise RuntimeError(
                f"staging table {self.staging_table} does not hold what the tasks staged for batch {batch_id} "
                f"(rows per task: found {found}, expected {expected}); was it changed from outside the sink?"
            )

    def _raise_if_stale(self, conn: Connection, error: BaseException) -> None:
        assert self._run is not None
        try:
            with conn.begin():
                storage.lock_offsets(conn, self.group_id, generation=self._run.generation)
        except StaleGenerationError as stale:
            raise stale from error

    # --- watermarks --------------------------------------------------------------

    def _report_watermarks(
        self, conn: Connection, stats: Mapping[TopicPartition, PartitionStats], key: tuple[str, str] | None
    ) -> None:
        # Best effort, after the commit and in a transaction of its own: the table is
        # shared by every group reading the topic, and a lag figure is not worth
        # holding its rows' locks through a batch, nor failing a batch over.
        progress_ends = _progress_log_ends(key[0]) if key else {}
        keys = sorted(stats)
        try:
            with conn.begin():
                known = storage.read_watermarks(conn, keys)
                marks = []
                for tp in keys:
                    s = stats[tp]
                    start, end = known.get(tp, (None, 0))
                    end = max(end, s.max_offset + 1, progress_ends.get(tp, 0))
                    # The log start is invisible from a batch: keep one a Kafka client
                    # reported, else the lowest offset seen, which certainly existed.
                    start = min(s.min_offset if start is None else start, end)
                    marks.append(Watermark(tp.topic, tp.partition, start, end))
                storage.report_watermarks(conn, marks)
        except sqlalchemy.exc.SQLAlchemyError as error:
            log.warning(
                "could not report watermarks",
                extra={"group_id": self.group_id, "error": type(getattr(error, "orig", error)).__name__},
            )


def _names(values: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(values, str):
        raise TypeError(f"{what} must be a sequence of column names, not a string")
    names = tuple(values)
    if any(not isinstance(n, str) or not n for n in names):
        raise ValueError(f"{what} must be non-empty strings")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} name a column twice")
    return names


def _spark_column(name: str) -> str:
    # Backticks: a name with a dot is a column, not a field of a struct.
    return "`" + name.replace("`", "``") + "`"


def _query_run(batch_df: DataFrame) -> tuple[str, str] | None:
    """(query id, run id) of the streaming query running this batch, where Spark tells."""
    try:
        context = batch_df.sparkSession.sparkContext
        query_id = context.getLocalProperty("sql.streaming.queryId")
        # StreamExecution runs each batch's jobs in a job group named after the run id.
        run_id = context.getLocalProperty("spark.jobGroup.id")
    except Exception:  # Spark Connect has no SparkContext; one run per sink object then.
        return None
    return (query_id, run_id or "") if query_id else None


def _progress_log_ends(query_id: str) -> dict[TopicPartition, int]:
    """Each partition's latest offset in the query's last progress (Kafka's ``latestOffset``)."""
    try:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        query = session.streams.get(query_id) if session is not None else None
        progress = query.lastProgress if query is not None else None
        if not progress:
            return {}
        ends: dict[TopicPartition, int] = {}
        for source in progress["sources"]:
            for tp, offset in _kafka_offsets(source.get("latestOffset")).items():
                ends[tp] = max(offset, ends.get(tp, 0))
        return ends
    except Exception:  # progress is a hint; a source that reports none leaves the batch's own ends
        log.debug("no latest offsets in the query's progress", exc_info=True)
        return {}


def _kafka_offsets(raw: object) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 42}}`` (Kafka's offset JSON, as text or parsed) as a dict; {} for anything else."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            continue
        for part, offset in parts.items():
            if isinstance(offset, int) and offset >= 0 and str(part).isdigit():
                out[TopicPartition(topic, int(part))] = offset
    return out
