"""Assembly of the metrics: the registries a server (or a supervisor and its serving processes) serves."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client import values as prometheus_values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from offsetstore.runtime.config import StoreObserver
from offsetstore.runtime.store import Store
from offsetstore.server.metrics.groups import SERIES_LIMIT, GroupCollector
from offsetstore.server.metrics.replication import ReplicationCollector
from offsetstore.server.metrics.rpc import LATENCY_BUCKETS, MetricsInterceptor, ServerMetrics

__all__ = [
    "OPERATIONS",
    "SCRAPE_CACHE_SECONDS",
    "SUMS_SECONDS",
    "RetentionMetrics",
    "StoreSeries",
    "build_registry",
    "interceptors",
    "retention_metrics",
    "server_metrics",
    "use_multiprocess",
    "worker_metrics",
]

# Store operations get zero-valued latency series at start (the names Store.run sees).
OPERATIONS = (
    "commit_offsets",
    "fetch_offsets",
    "reset_offsets",
    "delete_offsets",
    "join_group",
    "list_groups",
    "describe_group",
    "list_offset_history",
    "report_watermarks",
    "group_metrics",
)


def _build_version() -> str:
    try:
        return metadata.version("offsetstore")
    except metadata.PackageNotFoundError:
        return "unknown"


_SERVER_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, ServerMetrics] = weakref.WeakKeyDictionary()
_SERVER_METRICS_LOCK = threading.Lock()


def server_metrics(registry: CollectorRegistry) -> ServerMetrics:
    """The :class:`ServerMetrics` of ``registry``, created on first use."""
    with _SERVER_METRICS_LOCK:
        found = _SERVER_METRICS.get(registry)
        if found is None:
            found = _SERVER_METRICS[registry] = ServerMetrics(registry)
        return found


#: How long ``offsetstore serve`` reuses a scrape's database rows.
SCRAPE_CACHE_SECONDS = 5.0
#: How old ``offsetstore serve`` lets the sums of groups beyond their share of series get.
SUMS_SECONDS = 30.0


class RetentionMetrics:
    """The maintenance's series: the age of the oldest kept history, maintenance rounds (groups expired: :class:`StoreSeries`).

    The counter and histogram live on ``values``; the age is read at scrape time by a
    collector on ``served`` (the same registry unless the server runs several processes).
    """

    def __init__(self, values: CollectorRegistry, served: CollectorRegistry | None = None) -> None:
        #: Change time of the oldest kept history entry, set by each maintenance round.
        self.oldest_history: Any = None
        self.maintenance_seconds = Histogram(
            "offsetstore_maintenance_seconds",
            "Duration of maintenance rounds (partitions, history drop, expiry) this server ran.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=values,
        )
        self.maintenance_skipped = Counter(
            "offsetstore_maintenance_skipped",
            "Maintenance rounds skipped because the maintenance lock was taken (another server's round, or a squatter).",
            registry=values,
        )
        if served is not None:
            served.register(
                _Callback(
                    "offsetstore_history_oldest_seconds",
                    "Age of the oldest kept history entry (0 with no history), as of the latest maintenance round.",
                    self._oldest_age,
                )
            )

    def _oldest_age(self) -> float:
        oldest = self.oldest_history
        return 0.0 if oldest is None else max(0.0, time.time() - oldest.timestamp())


class _Callback(Collector):
    """A gauge read from a function at scrape time (in every process mode, unlike ``Gauge.set_function``)."""

    def __init__(self, name: str, documentation: str, value: Callable[[], float]) -> None:
        self.name, self.documentation, self.value = name, documentation, value

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation)]

    def collect(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, value=self.value())]


_RETENTION_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, RetentionMetrics] = weakref.WeakKeyDictionary()


def retention_metrics(registry: CollectorRegistry) -> RetentionMetrics:
    """The :class:`RetentionMetrics` of ``registry``, created on first use."""
    with _SERVER_METRICS_LOCK:
        found = _RETENTION_METRICS.get(registry)
        if found is None:
            found = _RETENTION_METRICS[registry] = RetentionMetrics(registry, registry)
        return found


def use_multiprocess(directory: str) -> None:
    """Makes the counters and histograms this process creates from now on live in ``directory``'s files.

    ``offsetstore serve`` runs its RPCs in processes of their own (``--processes``); each
    records into files of its own there, and the supervising process's ``/metrics`` sums
    them (prometheus-client's multiprocess mode).
    """
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    # The process id, read once and again after a fork: prometheus-client asks for it on
    # every increment and observation (a getpid() each, ~0.2 µs, ~10 of them a commit).
    prometheus_values.ValueClass = prometheus_values.MultiProcessValue(_process_id)  # type: ignore[no-untyped-call]  # unannotated upstream


_pid = [os.getpid()]


def _process_id() -> int:
    return _pid[0]


def _forked() -> None:
    _pid[0] = os.getpid()


os.register_at_fork(after_in_child=_forked)


class StoreSeries:
    """The series a store feeds as it runs: each operation's duration, the groups each expiry removed, each batch's calls.

    Made before the store, whose config takes :attr:`observer`
    (``StoreConfig(url, observer=series.observer)``), then given to :func:`build_registry`,
    which serves them: a store's hooks are given when it is made, never patched in after its
    pools are open. The series belong to no registry until one registers them (:meth:`register_in`).
    """

    def __init__(self) -> None:
        self.query_seconds = _query_seconds()
        self.groups_expired = Counter(
            "offsetstore_groups_expired",
            "Idle groups whose offsets expired (by the maintenance round or ExpireGroups).",
            registry=None,
        )
        self.batch_calls = _batch_calls()
        query_seconds, batch_calls = self.query_seconds, self.batch_calls
        #: The hooks for the store's config.
        self.observer = StoreObserver(
            operation=_observer(query_seconds), expired=self.groups_expired.inc, batch=_observer(batch_calls)
        )

    def register_in(self, registry: CollectorRegistry) -> None:
        """Makes ``registry`` serve (or, under :func:`use_multiprocess`, file) these series; once per registry."""
        for series in (self.query_seconds, self.groups_expired, self.batch_calls):
            registry.register(series)


def _observer(histogram: Histogram) -> Callable[[str, float], None]:
    """``histogram.labels(label).observe(value)``, each label's series looked up once (``labels()`` costs ~1 µs a call)."""
    series: dict[str, Any] = {}

    def observe(label: str, value: float) -> None:
        found = series.get(label)
        if found is None:
            found = series[label] = histogram.labels(label)
        found.observe(value)

    return observe


def worker_metrics() -> tuple[CollectorRegistry, StoreObserver]:
    """The metrics a serving process records: the registry (gRPC, store counters) for :func:`interceptors`, and the store's observer (query times, expiries).

    Made before the store, whose config takes the observer. Never served itself: under
    :func:`use_multiprocess` the values go to files that the supervising process's registry
    (:func:`build_registry` with ``multiprocess_dir``) sums.
    """
    registry = CollectorRegistry()
    server_metrics(registry)
    series = StoreSeries()
    series.register_in(registry)
    return registry, series.observer


#: Calls per batch: 1 (a batch of one: no sharing), up to the write batch's 512 requests.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _batch_calls() -> Histogram:
    batch_calls = Histogram(
        "offsetstore_database_batch_calls",
        "Calls sharing one database round of the hot path: a group commit's transaction (batch=write), "
        "a coalesced read's statement (batch=read).",
        ("batch",),
        buckets=BATCH_BUCKETS,
        registry=None,
    )
    for kind in ("write", "read"):
        batch_calls.labels(kind)
    return batch_calls


def _query_seconds() -> Histogram:
    query_seconds = Histogram(
        "offsetstore_database_query_seconds",
        "Duration of store operations, each one transaction, including retries and failures.",
        ("operation",),
        buckets=LATENCY_BUCKETS,
        registry=None,
    )
    for operation in OPERATIONS:
        query_seconds.labels(operation)
    return query_seconds


def build_registry(
    store: Store,
    *,
    series: StoreSeries | None = None,
    group_limit: int = 1000,
    scrape_store: Store | None = None,
    cache_seconds: float = 0.0,
    tenant_prefixes: Sequence[str] = (),
    multiprocess_dir: str | None = None,
    series_limit: int = SERIES_LIMIT,
    sums_seconds: float = 0.0,
) -> CollectorRegistry:
    """A registry with every offsetstore metric over ``store``; pass it to :func:`interceptors`.

    ``series`` are the store's own (:class:`StoreSeries`, whose observer ``store``'s config
    was given): without them the registry serves no operation times, expiries or batch sizes.

    ``scrape_store`` (default ``store``) runs the per-group query, on connections of its own,
    so scrapes never take one the RPCs need; its queries are timed by its own config's observer.
    ``cache_seconds``, ``tenant_prefixes``, ``series_limit``, ``sums_seconds``: see :class:`GroupCollector` and the group query.
    With ``multiprocess_dir`` (after :func:`use_multiprocess`), the registry sums what the
    serving processes recorded there; the RPC series and the pool gauge are theirs.
    """
    registry = CollectorRegistry()
    Info("offsetstore_build", "Version of the running offsetstore.", registry=registry).info(
        {"version": _build_version()}
    )
    if multiprocess_dir is None:
        values = registry
        server_metrics(registry)
        registry.register(
            _Callback(
                "offsetstore_database_pool_in_use",
                "Database connections checked out of the pool.",
                lambda: float(store.pool_in_use()),
            )
        )
    else:
        values = CollectorRegistry()  # never served: its values are in the files the collector sums
        MultiProcessCollector(registry, path=multiprocess_dir)  # type: ignore[no-untyped-call]  # unannotated upstream
    if series is not None:
        series.register_in(values)
    registry.register(
        GroupCollector(
            scrape_store or store,
            group_limit,
            cache_seconds=cache_seconds,
            tenant_prefixes=tenant_prefixes,
            series_limit=series_limit,
            sums_seconds=sums_seconds,
        )
    )
    registry.register(ReplicationCollector(scrape_store or store, cache_seconds=cache_seconds))
    with _SERVER_METRICS_LOCK:
        _RETENTION_METRICS[registry] = RetentionMetrics(values, registry)
    return registry


def interceptors(registry: CollectorRegistry) -> tuple[grpc.aio.ServerInterceptor, ...]:
    """The server interceptors that record into ``registry``."""
    return (MetricsInterceptor(server_metrics(registry)),)
