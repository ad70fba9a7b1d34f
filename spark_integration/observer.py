"""Watching a Spark query without touching it: each finished batch's Kafka end offsets, recorded as observed positions.

A query that keeps its positions in its own checkpoint (any sink, not the exactly-once one)
still reports every finished batch to the session's ``StreamingQueryListener`` s: the
progress event names, per source, the offsets the batch read up to (``endOffset``, the very
JSON Spark writes to ``offsets/N``) and the latest offsets it saw in Kafka (``latestOffset``).
:func:`observe` registers a listener that sends the first to the store as the group's
OBSERVED positions, and the second as log ends, so the group has lag, history and verdicts
like any other. It reads events only: it writes nothing to the checkpoint, the sink or Kafka.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import TopicPartition, Watermark
from offsetstore.spark_integration._progress import BatchPositions as BatchPositions
from offsetstore.spark_integration._progress import batch_positions

if TYPE_CHECKING:
    import grpc
    from prometheus_client import CollectorRegistry
    from prometheus_client import Counter as PromCounter
    from pyspark.sql import SparkSession

__all__ = ["BatchPositions", "SparkObserver", "batch_positions", "observe", "starting_offsets_at"]

log = logging.getLogger("offsetstore.spark_integration.observer")

# A Spark batch sees the log end (latestOffset), never the log start: "not observed".
_UNOBSERVED = -1


@dataclass(frozen=True)
class _Metrics:
    batches: PromCounter
    failures: PromCounter


_metrics_lock = threading.Lock()
_metrics: dict[Any, _Metrics] = {}


def _observer_metrics(registry: CollectorRegistry | None) -> _Metrics:
    """The observer's counters in ``registry`` (default: prometheus_client's REGISTRY), registered once per registry."""
    from prometheus_client import REGISTRY, Counter

    registry = REGISTRY if registry is None else registry
    with _metrics_lock:
        found = _metrics.get(registry)
        if found is None:
            found = _Metrics(
                Counter(
                    "offsetstore_spark_observer_batches_total",
                    "Finished Spark batches whose Kafka positions the observer recorded in the store.",
                    ["group"],
                    registry=registry,
                ),
                Counter(
                    "offsetstore_spark_observer_failures_total",
                    "Finished Spark batches the observer could not record (the store call failed); the query went on.",
                    ["group"],
                    registry=registry,
                ),
            )
            _metrics[registry] = found
        return found


class SparkObserver:
    """Records each finished batch of a Spark query's Kafka sources as a group's observed positions.

    Made by :func:`observe`, which registers it with the session; :meth:`stop` unregisters it.
    Its listener methods are called by Spark's listener bus, after the batch committed and
    apart from the query's own thread: the query never waits for the store.

    Attributes
    ----------
    batches : int
        Batches recorded in the store.
    failures : int
        Batches whose store call failed (also ``offsetstore_spark_observer_failures_total``).
    last_batch : BatchPositions or None
        The last batch recorded.
    """

    def __init__(
        self,
        client: OffsetStoreClient,
        group_id: str,
        *,
        query_name: str | None = None,
        report_watermarks: bool = True,
        timeout: float = 5.0,
        registry: CollectorRegistry | None = None,
        owns_client: bool = False,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group_id must be a non-empty string")
        if timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        self.group_id = group_id
        self.query_name = query_name
        self.report_watermarks = report_watermarks
        self.timeout = timeout
        self._client = client
        self._owns_client = owns_client
        self._metrics = _observer_metrics(registry)
        self._lock = threading.Lock()
        self._failing = False
        self.batches = 0
        self.failures = 0
        self.last_batch: BatchPositions | None = None
        # The log ends last reported: a batch that saw the same ones reports nothing.
        self._reported_ends: dict[TopicPartition, int] = {}
        self._spark: SparkSession | None = None
        self._listener: Any = None

    def __repr__(self) -> str:
        return f"SparkObserver({self._client!r}, group_id={self.group_id!r}, query_name={self.query_name!r})"

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Records one finished batch; never raises (a failure is counted, and logged once until the store answers again)."""
        try:
            if self.query_name is not None and progress.get("name") != self.query_name:
                return
            batch = batch_positions(progress)
            if not batch.offsets:
                return  # no Kafka source, or none has an offset yet
            source = f"spark:{progress['id']}"
            self._client.observe_offsets(self.group_id, batch.offsets, source=source, timeout=self.timeout)
            moved = {tp: end for tp, end in batch.log_ends.items() if self._reported_ends.get(tp) != end}
            if self.report_watermarks and moved:
                marks = [Watermark(tp.topic, tp.partition, _UNOBSERVED, end) for tp, end in moved.items()]
                self._client.report_watermarks(marks, timeout=self.timeout)
                self._reported_ends.update(moved)
        except Exception as error:  # whatever the store or the event did, the query goes on
            self._failed(progress, error)
        else:
            self._recorded(batch)

    def _recorded(self, batch: BatchPositions) -> None:
        with self._lock:
            recovered, self._failing = self._failing, False
            self.batches += 1
            self.last_batch = batch
        self._metrics.batches.labels(self.group_id).inc()
        if recovered:
            log.info(
                "spark observer: recording batches again",
                extra={"group_id": self.group_id, "batch": batch.batch_id, "failures": self.failures},
            )

    def _failed(self, progress: Mapping[str, Any], error: Exception) -> None:
        with self._lock:
            first, self._failing = not self._failing, True
            self.failures += 1
        self._metrics.failures.labels(self.group_id).inc()
        if first:
            # Said once per run of failures: a store that is down for an hour is one line, not one per batch.
            log.warning(
                "spark observer: could not record batch %s of group %s (%s: %s); the query goes on, "
                "later failures are counted in offsetstore_spark_observer_failures_total until one succeeds",
                progress.get("batchId"),
                self.group_id,
                type(error).__name__,
                error,
                extra={"group_id": self.group_id, "outcome": type(error).__name__},
            )

    def stop(self) -> None:
        """Unregisters the listener from the session and closes the client if the observer made it."""
        if self._spark is not None and self._listener is not None:
            self._spark.streams.removeListener(self._listener)
            self._listener = None
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> SparkObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ProgressJson:
    """The Py4J callback Spark's listener bus calls: each progress event read as one JSON string.

    PySpark's own callback (``JStreamingQueryListener``) rebuilds the whole event in Python
    first, a Py4J round trip per field (some 40 for a one-source query); the observer needs
    the sources' offsets only, and ``progress().json()`` brings them in one.
    """

    def __init__(self, observer: SparkObserver) -> None:
        self.observer = observer

    def onQueryStarted(self, jevent: Any) -> None:
        pass  # called synchronously with start(): nothing to do there

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            progress = json.loads(jevent.progress().json())
        except Exception as error:  # a Py4J error raised here would only be logged by Spark's bus
            self.observer._failed({}, error)
            return
        self.observer.on_progress(progress)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


@functools.cache
def _listener_type() -> type:
    """PySpark's ``StreamingQueryListener`` subclass that hands each progress to a :class:`SparkObserver`.

    Made on first use: PySpark is imported only when a session is observed. Registered, it
    gives Spark :class:`_ProgressJson` as its callback, in the wrapper PySpark's own
    listeners use; the ``on*`` methods are PySpark's path, used where that wrapper is missing.
    """
    from pyspark.sql.streaming import StreamingQueryListener

    class _ObserverListener(StreamingQueryListener):
        def __init__(self, observer: SparkObserver) -> None:
            self.observer = observer

        @property
        def _jlistener(self) -> Any:
            if not hasattr(self, "_jlistenerobj"):
                from pyspark import SparkContext

                try:
                    wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper  # type: ignore[union-attr]
                    self._jlistenerobj = wrapper(_ProgressJson(self.observer))
                except Exception:  # another PySpark: its own callback, field by field
                    return super()._jlistener
            return self._jlistenerobj

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            self.observer.on_progress(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return _ObserverListener


def observe(
    spark: SparkSession,
    group_id: str,
    target: str | OffsetStoreClient,
    *,
    query_name: str | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    token: str | None = None,
    timeout: float = 5.0,
    report_watermarks: bool = True,
    registry: CollectorRegistry | None = None,
) -> SparkObserver:
    """Records the Kafka positions of every finished batch of ``spark``'s streaming queries into ``group_id``.

    Parameters
    ----------
    spark : SparkSession
        The session whose queries are watched (a classic session; Spark Connect is not supported).
    group_id : str
        The observed group that receives the positions; one group per query.
    target : str or OffsetStoreClient
        The offset store's gRPC address (``host:port``), or a client to use (not closed by :meth:`SparkObserver.stop`).
    query_name : str, optional
        Watch only the query of this name (``writeStream.queryName``); default: every query of the session.
    credentials, token
        TLS channel credentials and bearer token for a client made from an address, as :class:`OffsetStoreClient` takes them.
    timeout : float, default 5.0
        Deadline of each store call, in seconds.
    report_watermarks : bool, default True
        Also report each partition's latest offset the batch saw as its log end, which gives the group its lag.
    registry : CollectorRegistry, optional
        Where the observer's counters live (default: prometheus_client's REGISTRY).

    Returns
    -------
    SparkObserver
        The registered observer: its counters, and :meth:`~SparkObserver.stop` to unregister it.

    Notes
    -----
    Spark calls the listener on its listener bus after each batch has committed (its
    ``commits/N`` written), apart from the query's thread, so the recorded positions are
    ``offsets/N`` of the last committed batch, shortly after it. The observer reads events
    only: it never writes to the checkpoint, the sink or Kafka (no consumer group, no
    commit). A failed store call is counted and logged once per run of failures; it never
    fails the query. The positions are observed, not owned: the query keeps reading from
    its checkpoint, whatever the store says.

    Examples
    --------
    >>> observer = observe(spark, "orders-etl", "offsetstore.internal:50051", query_name="orders")
    >>> query = (spark.readStream.format("kafka").option("subscribe", "orders").load()
    ...     .writeStream.queryName("orders").format("parquet").option("path", out)
    ...     .option("checkpointLocation", checkpoint).start())
    """
    if _is_remote(spark):
        raise TypeError("observe needs a classic SparkSession: Spark Connect runs listeners on its server")
    if isinstance(target, str):
        client = OffsetStoreClient(target, timeout=timeout, credentials=credentials, token=token)
        owns = True
    else:
        client, owns = target, False
    observer = SparkObserver(
        client,
        group_id,
        query_name=query_name,
        report_watermarks=report_watermarks,
        timeout=timeout,
        registry=registry,
        owns_client=owns,
    )
    listener = _listener_type()(observer)
    spark.streams.addListener(listener)
    observer._spark, observer._listener = spark, listener
    return observer


def _is_remote(spark: Any) -> bool:
    # A Spark Connect session is another class, from pyspark.sql.connect.
    return type(spark).__module__.startswith("pyspark.sql.connect")


def starting_offsets_at(
    target: str | OffsetStoreClient,
    group_id: str,
    at: datetime,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    token: str | None = None,
    timeout: float = 10.0,
) -> str:
    """Spark's ``startingOffsets`` JSON of ``group_id``'s positions at the instant ``at``, from its history.

    The positions are the server's own answer to a reset to ``at`` (``to_commit_time``), asked
    as a dry run: nothing of the group changes, observed or not. A partition that had no
    position then gets -2, which Spark reads as its earliest offset. ``target``, ``credentials``,
    ``token`` as for :func:`observe`.

    Examples
    --------
    >>> start = starting_offsets_at("offsetstore.internal:50051", "orders-parquet", datetime(2026, 12, 7, 9, 30, tzinfo=UTC))
    >>> spark.readStream.format("kafka").option("subscribe", "orders").option("startingOffsets", start)
    """
    if isinstance(target, str):
        with OffsetStoreClient(target, timeout=timeout, credentials=credentials, token=token) as client:
            return starting_offsets_at(client, group_id, at)
    result = target.reset_offsets(group_id, all_topics=True, to_commit_time=at, dry_run=True)
    document: dict[str, dict[str, int]] = {}
    for change in sorted(result.changes, key=lambda c: (c.topic, c.partition)):
        document.setdefault(change.topic, {})[str(change.partition)] = change.new_offset
    return json.dumps(document, separators=(",", ":"))
