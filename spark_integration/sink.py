"""The exactly-once foreachBatch sink: a micro-batch's rows and its offsets in one PostgreSQL transaction."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection, Engine

from offsetstore import storage
from offsetstore.sink import sql as sink_sql
from offsetstore.sink.batch_write import (
    BatchOutcome,
    Mode,
    SinkTarget,
    TableName,
    column_names,
    sink_metrics,
)
from offsetstore.spark_integration import (
    _driver_write,
    _faults,
    _fence_watch,
    _fingerprints,
    _kafka_cluster,
    _progress,
    _staged_write,
    workers,
)
from offsetstore.storage import engine as store_engine
from offsetstore.storage.clusters import bind_cluster

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from pyspark.sql import DataFrame

__all__ = ["ExactlyOnceSink", "Mode", "WritePath"]

log = logging.getLogger("offsetstore.spark_integration")

WritePath = Literal["auto", "driver", "executors"]


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
        ``"driver"`` collects the whole batch as Arrow and COPYs it inside the
        transaction; use it only where batches are bounded (``maxOffsetsPerTrigger``).
        ``"executors"`` has every task COPY its partition into a staging table in
        parallel, and the transaction then moves the rows. ``"auto"`` decides from
        each batch itself: it collects at most ``executor_threshold + 1`` rows of it;
        a batch that fits is written from the driver, a larger one by the executors.
    executor_threshold : int, default 200000
        Rows of a batch above which ``"auto"`` takes the executors; the most rows
        ``"auto"`` ever holds on the driver.
    staging_table : str or tuple of (str, str), optional
        The staging table of the executors' path. Default: one beside ``table``, named
        after it and the group. It belongs to the sink: it is dropped and recreated.
    member_id : str, optional
        Recorded when the run joins the group and as the actor of its commits.
        Default: ``"spark:<run id>"``.
    report_watermarks : bool, default True
        Report each batch's log ends (from the query's progress and the batch) to the
        store, for DescribeGroup's lag and the lag metrics.
    statement_timeout_ms : int, default 600000
        PostgreSQL ``statement_timeout`` of the sink's and the staging tasks' sessions:
        long enough for a big batch's COPY and move; 0 disables it.
    lock_timeout_ms : int, default 60000
        PostgreSQL ``lock_timeout`` of those sessions (waiting for the group's lock, or
        for the table's); 0 disables it.
    registry : prometheus_client.CollectorRegistry, optional
        Where the sink's counters go (default: prometheus_client's ``REGISTRY``).
        Not pickled: a copy counts into its own process's default registry.
    progress : bool, default True
        Print one line per batch on standard output (the log line's text), so a job
        that configured no logging still shows its progress. Turn it off where the
        ``offsetstore.spark_integration`` logger is routed somewhere already.
    check_workers : bool, default True
        Before the first write of each process, unless ``write_path="driver"``, run
        :func:`~offsetstore.spark_integration.workers.check_workers`: fail fast, with
        one line naming ``PYSPARK_PYTHON``, when Spark's Python workers cannot import
        offsetstore or run another version of it.
    watch_idle : bool, default True
        While the query finds no new data (so the sink is not called), read the group's
        generation at each of Spark's idle events (every
        ``spark.sql.streaming.noDataProgressEventInterval``, 10 s by default) and stop
        the query, with a WARNING, once a reset, a delete or a newer run moved it on.
        Classic Spark only: under Spark Connect an idle query stops at its next batch.
    bootstrap_servers : str, optional
        The query's Kafka brokers (its ``kafka.bootstrap.servers``). With it, each run binds
        the group to that cluster's id (read from the brokers' metadata when the run
        joins, with confluent-kafka, which the spark extra installs): a group bound to another
        cluster refuses the run with :class:`offsetstore.client.ClusterMismatchError`
        before anything is written, until ``offsetstore groups switch`` moves it; a group
        bound to none (an older one) is bound now. Without it the sink binds and checks
        nothing.
    kafka_config : mapping of str to str, optional
        librdkafka settings for that metadata request (TLS, SASL), beside
        ``bootstrap.servers``.
    fingerprints : bool, default True
        Store, with each committed offset and in its transaction, the fingerprint of the
        record before it (its timestamp and a digest of key, value and headers): what
        ``offsetstore groups switch`` finds on another cluster, exactly. Taken from the
        batch's row at each partition's highest offset, where the batch carries the Kafka
        source's ``key``, ``value`` and ``timestamp`` columns as the source gives them (and
        ``headers``, read with ``includeHeaders``, where the records have headers); a
        batch that lost them stores none.

    Notes
    -----
    Call protocol. Each call writes one batch in one transaction through
    :func:`offsetstore.sink.batch_write.deliver_batch`: lock the group (checking the
    run's generation), drop the rows below their partition's stored offset, write the
    rest, commit ``max(offset) + 1`` per partition with the storage core's
    ``commit_offsets``, then COMMIT. Nothing is acknowledged to Spark before the
    COMMIT, and a replayed or retried batch finds its rows' offsets already stored, so
    every source record reaches the table exactly once, whatever the checkpoint says.
    A stored sentinel (-2 earliest, -1 latest, left by a reset to a boundary with no
    known watermark) skips nothing in its partition.

    Durability. The sink's and the staging tasks' sessions are opened by the store's
    engine factory (:mod:`offsetstore.storage.engine`), with the server's settings:
    ``synchronous_commit=on`` whatever the database's default, bounded statements and
    lock waits.

    Observability. After each batch, one INFO line (and, with ``progress``, the same
    text on standard output) on the
    ``offsetstore.spark_integration`` logger gives the group, the batch id, the rows
    received, written and skipped, and the write path; and the counters
    ``offsetstore_sink_rows_written_total``, ``offsetstore_sink_rows_skipped_total``
    and ``offsetstore_sink_batches_total`` (label ``group``) grow. Skipped rows are a
    replay of delivered data, e.g. a query restarted without its checkpoint.

    Watermarks. A batch sees log ends, never the log start; the sink reports the
    start as -1 ("not observed"), so the store keeps one a Kafka client reported and
    otherwise knows none (a reset to earliest then stores the sentinel -2).

    Fencing. The first batch of each query run (Spark's ``runId``) joins the group,
    which moves its generation on; later commits carry that generation. A run that was
    superseded by a newer run of the group or by an operator's reset or delete raises
    :class:`offsetstore.client.StaleGenerationError` and writes nothing; the query
    then stops with that error. A run superseded while idle has no next batch: with
    ``watch_idle``, a listener of the run stops it at Spark's next idle event.

    The object is small and picklable: database connections are opened inside the
    call, on the driver and, for the executors' path, in each task.

    Tests reach into a batch (crash, fail a task, look at the store between two
    steps) through :mod:`offsetstore.spark_integration._faults`, not through the sink.

    Examples
    --------
    >>> sink = ExactlyOnceSink(url, group_id="orders-etl", table="public.orders")
    >>> start = starting_offsets(url, "orders-etl", {"orders": 12})
    >>> (spark.readStream.format("kafka").option("subscribe", "orders")
    ...     .option("startingOffsets", start).load()
    ...     .writeStream.foreachBatch(sink).option("checkpointLocation", path).start())
    """

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
        statement_timeout_ms: int = 600_000,
        lock_timeout_ms: int = 60_000,
        registry: CollectorRegistry | None = None,
        progress: bool = True,
        check_workers: bool = True,
        watch_idle: bool = True,
        bootstrap_servers: str | None = None,
        kafka_config: Mapping[str, str] | None = None,
        fingerprints: bool = True,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group_id must be a non-empty string")
        if write_path not in ("auto", "driver", "executors"):
            raise ValueError(f"write_path must be 'auto', 'driver' or 'executors', not {write_path!r}")
        if executor_threshold < 0:
            raise ValueError("executor_threshold must be >= 0")
        self.target = SinkTarget(
            TableName.parse(table),
            mode,
            column_names(key_columns, "key_columns"),
            None if columns is None else column_names(columns, "columns"),
        )
        # Checked here, not at the first batch, so a bad value fails where it is written.
        store_engine.SessionSettings(statement_timeout_ms, lock_timeout_ms)
        self.database_url = database_url
        self.group_id = group_id
        self.write_path: WritePath = write_path
        self.executor_threshold = executor_threshold
        self.staging_table = (
            TableName.parse(staging_table)
            if staging_table is not None
            else sink_sql.staging_name(self.target.table, group_id)
        )
        self.member_id = member_id
        self.report_watermarks = report_watermarks
        self.statement_timeout_ms = statement_timeout_ms
        self.lock_timeout_ms = lock_timeout_ms
        self._registry = registry
        self.progress = progress
        self.check_workers = check_workers
        self.watch_idle = watch_idle
        if bootstrap_servers is not None and (not isinstance(bootstrap_servers, str) or not bootstrap_servers):
            raise ValueError("bootstrap_servers must be a non-empty string")
        self.bootstrap_servers = bootstrap_servers
        self.kafka_config = dict(kafka_config or {})
        self.fingerprints = fingerprints
        self._reset_runtime()

    @property
    def table(self) -> TableName:
        """The sink table."""
        return self.target.table

    @property
    def mode(self) -> Mode:
        """``"append"`` or ``"upsert"``."""
        return self.target.mode

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The upsert's key columns (empty for append)."""
        return self.target.key_columns

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The columns written; None: every column of the batch."""
        return self.target.columns

    def _reset_runtime(self) -> None:
        self._engine: Engine | None = None
        self._run: _Run | None = None
        self._workers_checked = False

    # Pickling ships the configuration only; connections, the run and the registry are per process.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_engine", "_run", "_registry", "_workers_checked"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._registry = None
        self._reset_runtime()

    def __repr__(self) -> str:
        # Not the URL nor kafka_config: they may hold a password.
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
        key = _progress.query_run(batch_df)
        if self._run is not None and self._run.key != key:
            self._run = None
        _faults.at("start", batch_id)
        if self.check_workers and not self._workers_checked and self.write_path != "driver":
            # Before the run joins: a job that cannot write must not fence the one that can.
            workers.check_workers(batch_df.sparkSession)
            self._workers_checked = True
        batch_columns = batch_df.columns
        columns = self.target.written_columns(batch_columns)
        needed = columns + [c for c in sink_sql.COORDINATES if c not in columns]
        frame = batch_df if needed == batch_columns else batch_df.select(*[_spark_column(c) for c in needed])
        # The driver's path collects the fingerprint's columns too, written or not: no job of their own.
        extra = [c for c in _fingerprints.columns_of(batch_columns) if c not in needed] if self.fingerprints else []
        collect = batch_df.select(*[_spark_column(c) for c in needed + extra]) if extra else frame
        # One connection for the whole call, closed at its end: nothing lingers between
        # batches, and each of the call's transactions is on it in turn.
        with self._get_engine().connect() as conn:
            if self._run is None:
                self._run = self._join(conn, key)
                if self.watch_idle and key and key[1]:
                    _fence_watch.watch_idle(batch_df, self._get_engine(), self.group_id, self._run.generation, key[1])
            collected = _driver_write.collect_on_driver(self, collect)
            if collected is not None:
                path = "driver"
                found = _fingerprints.from_arrow(collected) if self.fingerprints else None
                outcome = _driver_write.write_from_driver(
                    self,
                    conn,
                    collected.select(needed) if extra else collected,
                    batch_id,
                    generation=self._run.generation,
                    actor=self._run.member,
                    metadata=_metadata(batch_id),
                    fingerprints=found,
                )
                del collected
            else:
                path = "executors"
                outcome = _staged_write.write_from_executors(
                    self,
                    conn,
                    frame,
                    columns,
                    batch_id,
                    generation=self._run.generation,
                    actor=self._run.member,
                    metadata=_metadata(batch_id),
                    # One more job over the batch: the max_by aggregation brings one row per partition.
                    fingerprints=_fingerprints.from_spark(batch_df) if self.fingerprints else None,
                )
            self._observe(batch_id, path, outcome)
            if self.report_watermarks and outcome.partitions:
                _progress.report_watermarks(conn, self.group_id, outcome.partitions, key[0] if key else None)
        _faults.at("committed", batch_id)

    def _get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = store_engine.create_engine(
                self.database_url,
                pool_size=None,
                statement_timeout_ms=self.statement_timeout_ms,
                lock_timeout_ms=self.lock_timeout_ms,
                application_name="offsetstore-spark-sink",
            )
        return self._engine

    def _join(self, conn: Connection, key: tuple[str, str] | None) -> _Run:
        member = self.member_id or (f"spark:{key[1]}" if key and key[1] else "spark")
        # Asked at each run's join: a query restarted on other brokers is checked against the group's cluster.
        found = _kafka_cluster.cluster_id(self.bootstrap_servers, self.kafka_config) if self.bootstrap_servers else None
        with conn.begin():
            generation = storage.join_group(conn, self.group_id, member)
            if found is not None:
                # In the join's transaction: refused, the join is undone too, and the group's run goes on unfenced.
                bind_cluster(conn, self.group_id, found)
            _staged_write.drop_staging(conn, self.staging_table)
        log.info(
            "joined group",
            extra={"group_id": self.group_id, "generation": generation, "member_id": member, "cluster_id": found},
        )
        return _Run(key, generation, member)

    def _observe(self, batch_id: int, path: str, outcome: BatchOutcome) -> None:
        """The batch's log line and counters: what an operator sees of a replay."""
        sink_metrics(self._registry).observe(self.group_id, outcome)
        line = (
            f"group {self.group_id} batch {batch_id}: {outcome.rows} rows, {outcome.written} written, "
            f"{outcome.skipped} skipped (offsets already committed), {path} path"
        )
        if self.progress:
            print(f"offsetstore: {line}", flush=True)
        log.info(
            "%s",
            line,
            extra={
                "group_id": self.group_id,
                "batch_id": batch_id,
                "rows": outcome.rows,
                "written": outcome.written,
                "skipped": outcome.skipped,
                "path": path,
                "driver_max_rows": self.executor_threshold if self.write_path == "auto" else None,
            },
        )


def _metadata(batch_id: int) -> str:
    return f"spark batch {batch_id}"


def _spark_column(name: str) -> str:
    # Backticks: a name with a dot is a column, not a field of a struct.
    return "`" + name.replace("`", "``") + "`"
