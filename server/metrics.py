"""Prometheus metrics of the server, on a registry of its own so tests can build and read theirs.

Three sources feed one :class:`~prometheus_client.CollectorRegistry`:

- one gRPC server interceptor records go-grpc-prometheus' ``grpc_server_*`` series and the
  store counters (commits, offsets committed, rejections by reason, resets), derived from
  the method, the request and the final status code;
- the Store reports each storage operation's duration (``offsetstore_database_query_seconds``);
- a collector reads the database at scrape time, in ONE statement, for the per-group
  series, the group count and ``offsetstore_database_up``; so offsets that the Spark sink
  commits straight into PostgreSQL show up as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import ssl
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
import psycopg
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from prometheus_client import CollectorRegistry, Counter, Histogram, Info, make_wsgi_app
from prometheus_client import values as prometheus_values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import (
    Connection,
    Text,
    and_,
    any_,
    bindparam,
    exists,
    extract,
    false,
    func,
    null,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects.postgresql import ARRAY

from offsetstore import storage
from offsetstore.server.config import split_host_port
from offsetstore.server.gate import current_request
from offsetstore.storage.schema import groups, offsets, watermarks
from offsetstore.storage.store import Store
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = [
    "GroupCollector",
    "MetricsHTTPServer",
    "MetricsInterceptor",
    "RetentionMetrics",
    "ServerMetrics",
    "build_registry",
    "interceptors",
    "retention_metrics",
    "serve_http",
]

log = logging.getLogger(__name__)

_OFFSET_STORE = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]
#: Every service the server registers; their methods get zero-valued series at start.
SERVICES: tuple[ServiceDescriptor, ...] = (
    _OFFSET_STORE,
    health_pb2.DESCRIPTOR.services_by_name["Health"],
    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"],
)

# go-grpc-prometheus labels codes with Go's codes.Code.String(), which dashboards match on.
GRPC_CODES: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.OK: "OK",
    grpc.StatusCode.CANCELLED: "Canceled",
    grpc.StatusCode.UNKNOWN: "Unknown",
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.DEADLINE_EXCEEDED: "DeadlineExceeded",
    grpc.StatusCode.NOT_FOUND: "NotFound",
    grpc.StatusCode.ALREADY_EXISTS: "AlreadyExists",
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "ResourceExhausted",
    grpc.StatusCode.FAILED_PRECONDITION: "FailedPrecondition",
    grpc.StatusCode.ABORTED: "Aborted",
    grpc.StatusCode.OUT_OF_RANGE: "OutOfRange",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
    grpc.StatusCode.INTERNAL: "Internal",
    grpc.StatusCode.UNAVAILABLE: "Unavailable",
    grpc.StatusCode.DATA_LOSS: "DataLoss",
    grpc.StatusCode.UNAUTHENTICATED: "Unauthenticated",
}

# The contract's error table: each rejection of a commit has its own status code.
REJECTION_REASONS: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.FAILED_PRECONDITION: "STALE_GENERATION",
    grpc.StatusCode.ABORTED: "OFFSET_MISMATCH",
    grpc.StatusCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
}

_COMMIT_METHOD = f"/{_OFFSET_STORE.full_name}/CommitOffsets"
_RESET_METHOD = f"/{_OFFSET_STORE.full_name}/ResetOffsets"

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

# Store round trips are milliseconds; Prometheus' defaults start at 5 ms.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _grpc_type(client_streaming: bool, server_streaming: bool) -> str:
    if client_streaming:
        return "bidi_stream" if server_streaming else "client_stream"
    return "server_stream" if server_streaming else "unary"


def _build_version() -> str:
    try:
        return metadata.version("offsetstore")
    except metadata.PackageNotFoundError:
        return "unknown"


# --- gRPC and store counters -------------------------------------------------------


class ServerMetrics:
    """The metric objects the interceptor records into, created on ``registry``."""

    def __init__(self, registry: CollectorRegistry, services: Iterable[ServiceDescriptor] = SERVICES) -> None:
        labels = ("grpc_type", "grpc_service", "grpc_method")
        self.started = Counter(
            "grpc_server_started", "Total number of RPCs started on the server.", labels, registry=registry
        )
        self.handled = Counter(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            (*labels, "grpc_code"),
            registry=registry,
        )
        self.handling_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.commits = Counter("offsetstore_commits", "CommitOffsets calls that committed.", registry=registry)
        self.offsets_committed = Counter(
            "offsetstore_offsets_committed", "Partition offsets written by CommitOffsets calls.", registry=registry
        )
        self.rejections = Counter(
            "offsetstore_commit_rejections",
            "CommitOffsets calls rejected, by ErrorInfo reason.",
            ("reason",),
            registry=registry,
        )
        self.resets = Counter(
            "offsetstore_resets", "ResetOffsets calls applied (dry runs excluded).", registry=registry
        )
        self._methods: dict[str, _MethodMetrics] = {}
        self._lock = threading.Lock()
        for service in services:
            for method in service.methods:
                kind = _grpc_type(method.client_streaming, method.server_streaming)
                self.method(f"/{service.full_name}/{method.name}", kind)
        for reason in REJECTION_REASONS.values():
            self.rejections.labels(reason)

    def method(self, full_method: str, kind: str) -> _MethodMetrics:
        """The series of one method, created (every code at zero) on first use."""
        found = self._methods.get(full_method)
        if found is not None and found.kind == kind:
            return found
        with self._lock:
            service, _, name = full_method.lstrip("/").rpartition("/")
            labels = (kind, service, name)
            found = _MethodMetrics(
                kind,
                self.started.labels(*labels),
                {code: self.handled.labels(*labels, text) for code, text in GRPC_CODES.items()},
                self.handling_seconds.labels(*labels),
            )
            self._methods[full_method] = found
            return found

    def kind_of(self, full_method: str) -> str | None:
        """The ``grpc_type`` of a method the server registers, None for any other."""
        found = self._methods.get(full_method)
        return None if found is None else found.kind

    def record_store_outcome(self, full_method: str, request: Any, code: grpc.StatusCode) -> None:
        """Counts commits, rejections and resets from a finished unary call."""
        if full_method == _COMMIT_METHOD:
            if code == grpc.StatusCode.OK:
                self.commits.inc()
                self.offsets_committed.inc(len(request.offsets))
            elif (reason := REJECTION_REASONS.get(code)) is not None:
                self.rejections.labels(reason).inc()
        elif full_method == _RESET_METHOD and code == grpc.StatusCode.OK and not request.dry_run:
            self.resets.inc()


@dataclass(frozen=True)
class _MethodMetrics:
    kind: str
    started: Any
    handled: dict[grpc.StatusCode, Any]
    seconds: Any

    def done(self, code: grpc.StatusCode, started_at: float) -> None:
        self.handled.get(code, self.handled[grpc.StatusCode.UNKNOWN]).inc()
        self.seconds.observe(time.perf_counter() - started_at)


def _final_code(context: grpc.aio.ServicerContext, raised: bool) -> grpc.StatusCode:
    # abort()/abort_with_status() set the code and then raise; an exception without
    # a code set becomes UNKNOWN on the wire, and a return without one is OK.
    code = context.code()
    if isinstance(code, int):  # some grpc versions keep the raw integer
        code = next((c for c in grpc.StatusCode if c.value[0] == code), None)
    if code is None:
        return grpc.StatusCode.UNKNOWN if raised else grpc.StatusCode.OK
    return code


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Records go-grpc-prometheus' server metrics and the store counters for every call.

    The series are recorded before the response leaves the server, so a client that has
    its answer reads metrics that already count its call. The offset store's methods are
    served as client streams by the gate (:mod:`offsetstore.server.gate`), which reads the
    request itself; they are counted as the unary methods they are, with the request the
    gate decoded (:data:`~offsetstore.server.gate.current_request`).
    """

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None  # unknown method: gRPC answers UNIMPLEMENTED; no unbounded labels
        full_method: str = details.method  # type: ignore[attr-defined]
        kind = _grpc_type(handler.request_streaming, handler.response_streaming)
        m = self.metrics.method(full_method, self.metrics.kind_of(full_method) or kind)
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if kind == "unary":
            return grpc.unary_unary_rpc_method_handler(self._unary(full_method, m, handler.unary_unary), **options)
        if kind == "client_stream":
            return grpc.stream_unary_rpc_method_handler(self._unary(full_method, m, handler.stream_unary), **options)
        behaviour = handler.unary_stream if kind == "server_stream" else handler.stream_stream
        if kind == "server_stream":
            return grpc.unary_stream_rpc_method_handler(self._streaming(m, behaviour), **options)
        return grpc.stream_stream_rpc_method_handler(self._streaming(m, behaviour), **options)

    def _unary(self, full_method: str, m: _MethodMetrics, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
            m.started.inc()
            started_at = time.perf_counter()
            raised = True
            slot = current_request.set(None)
            try:
                response = await behaviour(request, context)
                raised = False
                return response
            except asyncio.CancelledError:
                m.done(grpc.StatusCode.CANCELLED, started_at)
                raised = None
                raise
            finally:
                if raised is not None:
                    code = _final_code(context, bool(raised))
                    m.done(code, started_at)
                    decoded = current_request.get()
                    if decoded is not None:
                        self.metrics.record_store_outcome(full_method, decoded, code)
                current_request.reset(slot)

        return run

    @staticmethod
    def _streaming(m: _MethodMetrics, behaviour: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
        async def run(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            m.started.inc()
            started_at = time.perf_counter()
            code: grpc.StatusCode | None = None
            try:
                if inspect.isasyncgenfunction(behaviour):
                    async for response in behaviour(request, context):
                        yield response
                else:  # a coroutine that writes its responses (health's Watch)
                    await behaviour(request, context)
                code = _final_code(context, raised=False)
            except (asyncio.CancelledError, GeneratorExit):
                code = grpc.StatusCode.CANCELLED  # the call ended while streaming
                raise
            except BaseException:
                code = _final_code(context, raised=True)
                raise
            finally:
                m.done(code or grpc.StatusCode.UNKNOWN, started_at)

        return run


# --- the database at scrape time -----------------------------------------------------


def _build_group_query():
    # The first of a scrape's two statements: which groups, how big each is, and the number
    # of all groups, left-joined so that it comes back even when the page is empty. Its cost
    # grows with the shown groups' partitions (a count and a max over each group's rows), never
    # with a join over them: that one runs in the second statement, on bounded rows.
    #
    # Which groups (issue 14): only groups with offsets (a JoinGroup costs nothing and shows
    # nothing), taken round-robin over tenants: every tenant's first group by id, then every
    # tenant's second, ... A tenant is the longest granted prefix the group id starts with
    # (`prefixes`, from the tokens file), else the id up to its first '-', '.' or '_'. So a
    # tenant that creates a thousand groups pushes out its own, never another tenant's.
    live = groups.c.deleted_at.is_(None)  # a deleted group's tombstone is no group
    has_offsets = exists().where(offsets.c.group_id == groups.c.group_id)
    granted = func.unnest(bindparam("prefixes", type_=ARRAY(Text))).table_valued("prefix").render_derived("granted")
    longest = (
        select(granted.c.prefix)
        .where(func.starts_with(groups.c.group_id, granted.c.prefix))
        .order_by(func.length(granted.c.prefix).desc())
        .limit(1)
        .scalar_subquery()
    )
    tenant = func.coalesce(longest, func.substring(groups.c.group_id, r"^[^-._]*"))
    ranked = (
        select(
            groups.c.group_id,
            tenant.label("tenant"),
            func.row_number().over(partition_by=tenant, order_by=groups.c.group_id).label("turn"),
        )
        .where(live, has_offsets)
        .subquery("ranked")
    )
    page = (
        select(ranked.c.group_id, ranked.c.tenant)
        .order_by(ranked.c.turn, ranked.c.tenant, ranked.c.group_id)
        .limit(bindparam("limit"))
        .subquery("page")
    )
    total = (
        select(
            func.count().label("groups"),
            func.count().filter(has_offsets).label("with_offsets"),
        )
        .select_from(groups)
        .where(live)
        .cte("total")
    )
    # Read from the primary key's range of the group (and its rows' commit times).
    size = (
        select(
            func.count().label("partitions"),
            extract("epoch", func.now() - func.max(offsets.c.commit_time)).label("age"),
        )
        .where(offsets.c.group_id == page.c.group_id)
        .lateral("size")
    )
    shown = select(page.c.group_id, page.c.tenant, size.c.partitions, size.c.age).select_from(page.join(size, true()))
    shown_sq = shown.subquery("shown")
    s = shown_sq.c
    return select(total.c.groups, total.c.with_offsets, s.group_id, s.tenant, s.partitions, s.age).select_from(
        total.outerjoin(shown_sq, true())
    )


def _build_partition_query():
    # The second statement: the partitions of the groups that fit their share (at most the
    # series budget's rows), and one row of sums for each group that does not.
    _, lag = storage.lag_columns()
    past_end = storage.past_log_end_column()
    lag_seconds = storage.lag_seconds_column()
    joined = offsets.outerjoin(
        watermarks, and_(watermarks.c.topic == offsets.c.topic, watermarks.c.partition == offsets.c.partition)
    )
    ids = ARRAY(Text)
    detail = (
        select(
            offsets.c.group_id,
            offsets.c.topic,
            offsets.c.partition,
            offsets.c.offset,
            lag.label("lag"),
            past_end.label("past_end"),
            null().label("lag_sum"),
            null().label("past_ends"),
            lag_seconds.label("lag_seconds"),
        )
        .select_from(joined)
        .where(offsets.c.group_id == any_(bindparam("detailed", type_=ids)))
    )
    known = lag >= 0
    summary = (
        select(
            offsets.c.group_id,
            null(),
            null(),
            null(),
            func.coalesce(func.max(lag).filter(known), -1),
            false(),
            func.sum(lag).filter(known),
            func.count().filter(past_end),
            func.max(lag_seconds).filter(lag_seconds >= 0),
        )
        .select_from(joined)
        .where(offsets.c.group_id == any_(bindparam("summarized", type_=ids)))
        .group_by(offsets.c.group_id)
    )
    return union_all(detail, summary)


_GROUP_QUERY = _build_group_query()
_PARTITION_QUERY = _build_partition_query()

#: Series each shown group has whatever its size: partitions, lag sum, max lag, last commit
#: age, partitions past the log end, lag in seconds. Each of its partitions adds at most two:
#: its offset, and its lag or its past-log-end flag (a partition past the log end has no lag).
GROUP_SERIES = 6
PARTITION_SERIES = 2


@dataclass(frozen=True)
class GroupScrape:
    """What one scrape read: the group counts, the shown groups' sizes, and the partition rows."""

    groups: int
    with_offsets: int
    shown: list[Any]
    partitions: list[Any]
    detailed: frozenset[str]


def share_series(sizes: Sequence[tuple[str, str, int]], budget: int) -> frozenset[str]:
    """The groups whose partitions get series of their own, from (group, tenant, partitions) and a series budget.

    Fair across tenants (max-min): each tenant may use an equal share of the budget, a
    tenant that needs less leaves the rest to the others, and within its share a tenant's
    groups are taken smallest first. A group that does not fit its tenant's share gets no
    per-partition series (its sums stand for it), so a huge group never pushes out another
    tenant's, nor its own tenant's small ones. Budget a share leaves unused because the
    groups left are larger is offered again, in a few more rounds.
    """
    pending: dict[str, list[tuple[int, str]]] = {}
    for group, tenant, partitions in sizes:
        pending.setdefault(tenant, []).append((partitions * PARTITION_SERIES, group))
    for found in pending.values():
        found.sort()
    chosen: set[str] = set()
    for _ in range(8):
        if budget <= 0 or not pending:
            break
        # Water-filling: tenants in order of what they still need; each gets the smaller of
        # its need and an equal part of what is left.
        need = sorted(((sum(c for c, _ in found), tenant) for tenant, found in pending.items()))
        taken_any = False
        left = budget
        for i, (wanted, tenant) in enumerate(need):
            share = min(wanted, left // (len(need) - i))
            used = 0
            found = pending[tenant]
            while found and used + found[0][0] <= share:
                cost, group = found.pop(0)
                used += cost
                chosen.add(group)
            left -= used
            budget -= used
            taken_any = taken_any or used > 0
            if not found:
                del pending[tenant]
        if not taken_any:
            break
    return frozenset(chosen)


def group_metrics(
    conn: Connection, limit: int, prefixes: Sequence[str] = (), series_limit: int = 0, sums: bool = True
) -> GroupScrape:
    """The rows of one scrape, in two statements whatever the store's size (a storage-style operation).

    ``limit`` caps the shown groups, ``series_limit`` (0: none) the per-group series; see
    :class:`GroupCollector`. Without ``sums``, the groups beyond their share get no row of
    sums (:func:`group_sums` reads them apart).
    """
    if series_limit > 0:
        limit = min(limit, series_limit // GROUP_SERIES)
    rows = conn.execute(_GROUP_QUERY, {"limit": limit, "prefixes": list(prefixes)}).all()
    shown = [r for r in rows if r.group_id is not None]
    head = rows[0] if rows else None
    if series_limit > 0:
        budget = series_limit - GROUP_SERIES * len(shown)
        detailed = share_series([(r.group_id, r.tenant, r.partitions) for r in shown], budget)
    else:
        detailed = frozenset(r.group_id for r in shown)
    summarized = [r.group_id for r in shown if r.group_id not in detailed]
    partitions: list[Any] = []
    if shown:
        summarized = summarized if sums else []
        partitions = conn.execute(_PARTITION_QUERY, {"detailed": sorted(detailed), "summarized": summarized}).all()
    return GroupScrape(
        groups=head.groups if head else 0,
        with_offsets=head.with_offsets if head else 0,
        shown=shown,
        partitions=partitions,
        detailed=detailed,
    )


def group_sums(conn: Connection, group_ids: Sequence[str]) -> list[Any]:
    """One row of sums (lag sum, max lag, partitions past the log end) for each of ``group_ids``."""
    return conn.execute(_PARTITION_QUERY, {"detailed": [], "summarized": list(group_ids)}).all()


#: Per-group series a scrape holds at most, by default: rendered in well under a second.
SERIES_LIMIT = 20_000


class GroupCollector(Collector):
    """Per-group series and ``offsetstore_database_up``, read in two statements at scrape time.

    Bounded twice: at most ``group_limit`` groups are shown (taken round-robin over tenants),
    and the per-group series stay within ``series_limit`` (0: no limit). Every shown group has
    its partition count, lag sum, max lag, last commit age, partitions past the log end and lag in seconds;
    its partitions have series of their own only while the group fits its tenant's fair share
    of the budget (:func:`share_series`).

    The sums of a group beyond its share cost a join over all its partitions (0.5 s for 900,000
    on a loaded machine). With ``sums_seconds`` > 0 a scrape does not wait for them: it shows
    the latest ones, and a thread reads them again when they are older than that (the lag sum
    and max lag of such a group are up to ``sums_seconds`` old, plus the query's time). At 0
    every scrape reads them itself.

    One scrape queries at a time, and a scrape within ``cache_seconds`` of the last query
    reuses its rows: however many scrapers (or attackers) connect at once, the database
    sees at most one metrics query per ``cache_seconds``.
    """

    def __init__(
        self,
        store: Store,
        group_limit: int,
        *,
        cache_seconds: float = 0.0,
        tenant_prefixes: Sequence[str] = (),
        series_limit: int = SERIES_LIMIT,
        sums_seconds: float = 0.0,
    ) -> None:
        if group_limit < 0:
            raise ValueError("group_limit must be >= 0")
        if series_limit < 0:
            raise ValueError("series_limit must be >= 0 (0: no limit)")
        self.store = store
        self.group_limit = group_limit
        self.series_limit = series_limit
        self.tenant_prefixes = tuple(tenant_prefixes)
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, GroupScrape | BaseException] | None = None
        self.sums_seconds = sums_seconds
        self._sums: dict[str, Any] = {}  # group -> its row of sums, refreshed in the background
        self._sums_at = -float("inf")
        self._refreshing: threading.Thread | None = None

    def _background_sums(self, scrape: GroupScrape) -> dict[str, Any]:
        """The latest sums of the groups beyond their share; starts a refresh when they are old, never waits for it."""
        wanted = [r.group_id for r in scrape.shown if r.group_id not in scrape.detailed]
        with self._lock:
            stale = time.monotonic() - self._sums_at >= self.sums_seconds or not set(wanted) <= self._sums.keys()
            if wanted and stale and (self._refreshing is None or not self._refreshing.is_alive()):
                self._refreshing = threading.Thread(
                    target=self._refresh_sums, args=(wanted,), name="offsetstore-group-sums", daemon=True
                )
                self._refreshing.start()
            return self._sums

    def _refresh_sums(self, group_ids: list[str]) -> None:
        try:
            rows = self.store.run(group_sums, group_ids)
        except Exception as error:
            log.warning("group sums query failed", extra={"error": type(error).__name__})
            return
        with self._lock:
            self._sums = {r.group_id: r for r in rows}
            self._sums_at = time.monotonic()

    def _rows(self) -> GroupScrape:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                try:
                    result: GroupScrape | BaseException = self.store.run(
                        group_metrics,
                        self.group_limit,
                        self.tenant_prefixes,
                        self.series_limit,
                        self.sums_seconds <= 0,
                    )
                except Exception as error:
                    result = error
                self._cached = (time.monotonic(), result)
            found = self._cached[1]
        if isinstance(found, BaseException):
            raise found
        return found

    def _families(self) -> dict[str, GaugeMetricFamily]:
        group = ("group",)
        return {
            "up": GaugeMetricFamily(
                "offsetstore_database_up", "1 when the database answered this scrape's query, else 0."
            ),
            "groups": GaugeMetricFamily("offsetstore_groups", "Groups in the store."),
            "omitted": GaugeMetricFamily(
                "offsetstore_groups_omitted",
                "Groups with offsets but without per-group series, beyond the group metrics limit "
                "(taken round-robin over tenants).",
            ),
            "summarized": GaugeMetricFamily(
                "offsetstore_groups_summarized",
                "Groups shown by their sums only: their partitions did not fit their tenant's share "
                "of the metrics series limit.",
            ),
            "offset": GaugeMetricFamily(
                "offsetstore_group_offset",
                "Committed offset (the next to consume; -2/-1 are the earliest/latest sentinels).",
                labels=("group", "topic", "partition"),
            ),
            "lag": GaugeMetricFamily(
                "offsetstore_group_lag",
                "Log end offset minus committed offset, where a log end has been reported.",
                labels=("group", "topic", "partition"),
            ),
            "past_end": GaugeMetricFamily(
                "offsetstore_group_offset_past_log_end",
                "1 where the committed offset is past the reported log end: an anomaly (lag is not 0, "
                "nothing is consumed until the log reaches it); alert on it.",
                labels=("group", "topic", "partition"),
            ),
            "partitions": GaugeMetricFamily(
                "offsetstore_group_partitions", "Partitions the group has an offset for.", labels=group
            ),
            "lag_sum": GaugeMetricFamily(
                "offsetstore_group_lag_sum",
                "Sum of the group's partition lags, over partitions with a known log end.",
                labels=group,
            ),
            "max_lag": GaugeMetricFamily(
                "offsetstore_group_max_lag",
                "Largest partition lag of the group, over partitions with a known log end.",
                labels=group,
            ),
            "past_ends": GaugeMetricFamily(
                "offsetstore_group_partitions_past_log_end",
                "Partitions of the group whose committed offset is past the reported log end (see "
                "offsetstore_group_offset_past_log_end).",
                labels=group,
            ),
            "lag_seconds": GaugeMetricFamily(
                "offsetstore_group_lag_seconds",
                "Largest partition lag of the group in seconds: how long ago the log end passed the "
                "committed offset, interpolated between reported log ends (0: caught up). Absent "
                "while no partition's is known.",
                labels=group,
            ),
            "age": GaugeMetricFamily(
                "offsetstore_group_last_commit_age_seconds",
                "Seconds since the group's most recent offset change.",
                labels=group,
            ),
        }

    def describe(self) -> Iterable[Metric]:
        # Names only, so registering the collector never queries the database.
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        f = self._families()
        try:
            scrape = self._rows()
        except Exception as error:  # a scrape reports the failure, it never fails itself
            answered = _timed_out(error)
            log.warning(
                "group metrics query timed out; consider a lower group metrics limit"
                if answered
                else "group metrics query failed",
                extra={"error": type(getattr(error.__cause__, "orig", error)).__name__},
            )
            f["up"].add_metric([], 1 if answered else 0)
            return [f["up"]]
        f["up"].add_metric([], 1)
        f["groups"].add_metric([], scrape.groups)
        f["omitted"].add_metric([], max(0, scrape.with_offsets - len(scrape.shown)))
        f["summarized"].add_metric([], len(scrape.shown) - len(scrape.detailed))
        # lag sum, max lag (None: no log end known), partitions past the log end, max lag seconds
        sums: dict[str, list[Any]] = {r.group_id: [None, None, 0, None] for r in scrape.shown}
        rows: Iterable[Any] = scrape.partitions
        if self.sums_seconds > 0:
            latest = self._background_sums(scrape)
            rows = [*rows, *(latest[g] for g in sums if g not in scrape.detailed and g in latest)]
        for r in rows:
            found = sums[r.group_id]
            if r.topic is None:  # the sums of a group that did not fit its share
                found[:] = [r.lag_sum, r.lag if r.lag >= 0 else None, r.past_ends, r.lag_seconds]
                continue
            if r.lag_seconds >= 0:
                found[3] = max(found[3] or 0.0, r.lag_seconds)
            labels = [r.group_id, r.topic, str(r.partition)]
            f["offset"].add_metric(labels, r.offset)
            if r.lag >= 0:
                f["lag"].add_metric(labels, r.lag)
                found[0] = (found[0] or 0) + r.lag
                found[1] = max(found[1] or 0, r.lag)
            if r.past_end:
                f["past_end"].add_metric(labels, 1)
                found[2] += 1
        for r in scrape.shown:
            lag_sum, max_lag, past_ends, lag_seconds = sums[r.group_id]
            f["partitions"].add_metric([r.group_id], r.partitions)
            if lag_sum is not None:
                f["lag_sum"].add_metric([r.group_id], int(lag_sum))
                f["max_lag"].add_metric([r.group_id], max_lag)
            f["past_ends"].add_metric([r.group_id], past_ends)
            if lag_seconds is not None:
                f["lag_seconds"].add_metric([r.group_id], lag_seconds)
            f["age"].add_metric([r.group_id], max(0.0, float(r.age)))
        return list(f.values())


def _timed_out(error: BaseException | None) -> bool:
    """True when the database answered, but cancelled the query at its statement timeout."""
    while error is not None:  # a DBAPIError itself, or one wrapped in a StoreUnavailableError
        if isinstance(getattr(error, "orig", None), psycopg.errors.QueryCanceled):
            return True
        error = error.__cause__
    return False


def time_operations(store: Store, histogram: Histogram) -> None:
    """Makes ``store`` observe each operation's duration (failures included) into ``histogram``.

    A second registry built over the same store takes the timing over.
    """
    store.observe = lambda operation, seconds: histogram.labels(operation).observe(seconds)


# --- assembly --------------------------------------------------------------------------

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
    """Retention's series: groups expired, the age of the oldest kept history, maintenance rounds.

    The counter and histogram live on ``values``; the age is read at scrape time by a
    collector on ``served`` (the same registry unless the server runs several processes).
    """

    def __init__(self, values: CollectorRegistry, served: CollectorRegistry | None = None) -> None:
        self.groups_expired = Counter(
            "offsetstore_groups_expired",
            "Idle groups whose offsets expired (by the maintenance round or ExpireGroups).",
            registry=values,
        )
        #: Change time of the oldest kept history entry, set by each maintenance round.
        self.oldest_history: Any = None
        self.maintenance_seconds = Histogram(
            "offsetstore_maintenance_seconds",
            "Duration of maintenance rounds (partitions, history drop, expiry) this server ran.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
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
    prometheus_values.ValueClass = prometheus_values.MultiProcessValue()


def worker_registry(store: Store) -> CollectorRegistry:
    """The metrics a serving process records (gRPC, store counters, query times), for :func:`interceptors`.

    Never served itself: under :func:`use_multiprocess` the values go to files that the
    supervising process's registry (:func:`build_registry` with ``multiprocess_dir``) sums.
    """
    registry = CollectorRegistry()
    server_metrics(registry)
    _time_store(store, registry)
    store.expired = RetentionMetrics(registry).groups_expired.inc
    return registry


def _time_store(store: Store, registry: CollectorRegistry) -> Histogram:
    query_seconds = Histogram(
        "offsetstore_database_query_seconds",
        "Duration of store operations, each one transaction, including retries and failures.",
        ("operation",),
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    for operation in OPERATIONS:
        query_seconds.labels(operation)
    time_operations(store, query_seconds)
    return query_seconds


def build_registry(
    store: Store,
    *,
    group_limit: int = 1000,
    scrape_store: Store | None = None,
    cache_seconds: float = 0.0,
    tenant_prefixes: Sequence[str] = (),
    multiprocess_dir: str | None = None,
    series_limit: int = SERIES_LIMIT,
    sums_seconds: float = 0.0,
) -> CollectorRegistry:
    """A registry with every offsetstore metric over ``store``; pass it to :func:`interceptors`.

    ``scrape_store`` (default ``store``) runs the per-group query: ``offsetstore serve``
    gives it a connection of its own, so scrapes never take one the RPCs need.
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
        pool = store.engine.pool
        registry.register(
            _Callback(
                "offsetstore_database_pool_in_use",
                "Database connections checked out of the pool.",
                lambda: pool.checkedout() if hasattr(pool, "checkedout") else 0,
            )
        )
    else:
        values = CollectorRegistry()  # never served: its values are in the files the collector sums
        MultiProcessCollector(registry, path=multiprocess_dir)
    query_seconds = _time_store(store, values)
    if scrape_store is not None and scrape_store is not store:
        time_operations(scrape_store, query_seconds)
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
    with _SERVER_METRICS_LOCK:
        retention = _RETENTION_METRICS[registry] = RetentionMetrics(values, registry)
    store.expired = retention.groups_expired.inc
    return registry


def interceptors(registry: CollectorRegistry) -> tuple[grpc.aio.ServerInterceptor, ...]:
    """The server interceptors that record into ``registry``."""
    return (MetricsInterceptor(server_metrics(registry)),)


#: Connections ``/metrics`` serves at once; more are closed at once. A Prometheus or two
#: need a handful; thousands of idle ones must not become thousands of threads.
MAX_HTTP_CONNECTIONS = 16
#: Connections one peer address may hold at once: one scraper needs one, an HA pair one each;
#: a peer that opens more cannot hold every slot (issue 22).
MAX_HTTP_CONNECTIONS_PER_PEER = 4
#: Seconds a ``/metrics`` connection may stay silent (TLS handshake included) before it is dropped.
HTTP_TIMEOUT_SECONDS = 10.0
#: Seconds from accepting a connection to its complete request (TLS handshake and headers): a
#: peer sending a byte now and then is never silent, but is dropped at this deadline.
HTTP_REQUEST_SECONDS = 10.0
#: Seconds a connection lives at most, answer included: a peer reading the answer a byte at a
#: time is dropped too.
HTTP_CONNECTION_SECONDS = 60.0


class _Watch:
    """One connection's deadlines: shut it down unless its request is complete in time, and at the end of its life."""

    def __init__(self, sock: socket.socket, request_seconds: float, connection_seconds: float) -> None:
        self.sock = sock
        self.complete = False
        self.connection_seconds = connection_seconds - request_seconds
        self._lock = threading.Lock()
        self._timer = threading.Timer(request_seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if self._timer is None:
                return
            if self.complete and self.connection_seconds > 0:  # the request came in time: now the answer's deadline
                self._timer = threading.Timer(self.connection_seconds, self._expire)
                self._timer.daemon = True
                self.connection_seconds = 0
                self._timer.start()
                return
            self._timer = None
        # The socket class's own shutdown, not SSLSocket's (which would drop its TLS state under
        # the thread reading it): the reader gets end-of-file or an error, and the thread ends.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


class _QuietHandler(WSGIRequestHandler):
    timeout = HTTP_TIMEOUT_SECONDS  # StreamRequestHandler applies it to the socket

    def parse_request(self) -> bool:
        ok = super().parse_request()  # the request line and every header have been read
        watch = self.server.watches.get(id(self.request))  # type: ignore[attr-defined]
        if ok and watch is not None:
            watch.complete = True
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """prometheus-client's thread-per-connection WSGI server, with caps on connections (in all and
    per peer), a deadline to a complete request and to the end of a connection, and a TLS
    handshake that runs on the connection's thread under them, not in the accept loop."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None
    slots: threading.BoundedSemaphore
    timeout_seconds: float = HTTP_TIMEOUT_SECONDS
    request_seconds: float = HTTP_REQUEST_SECONDS
    connection_seconds: float = HTTP_CONNECTION_SECONDS
    max_per_peer: int = MAX_HTTP_CONNECTIONS_PER_PEER
    peers: dict[str, int]
    peers_lock: threading.Lock
    watches: dict[int, _Watch]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A connection shut at its deadline ends its handler with an error: that is the point.
        log.debug("metrics connection ended with an error", exc_info=True)

    def _enter_peer(self, peer: str) -> bool:
        with self.peers_lock:
            held = self.peers.get(peer, 0)
            if held >= self.max_per_peer:
                return False
            self.peers[peer] = held + 1
            return True

    def _leave_peer(self, peer: str) -> None:
        with self.peers_lock:
            held = self.peers.pop(peer, 1) - 1
            if held > 0:
                self.peers[peer] = held

    def process_request(self, request: Any, client_address: Any) -> None:
        peer = str(client_address[0])
        if not self._enter_peer(peer):
            self.shutdown_request(request)  # this peer holds its share: refuse, keep the slots for others
            return
        if not self.slots.acquire(blocking=False):
            self._leave_peer(peer)
            self.shutdown_request(request)  # full: refuse at once rather than queue a thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            self._leave_peer(peer)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        watch = _Watch(request, self.request_seconds, self.connection_seconds)
        key = id(request)
        try:
            request.settimeout(self.timeout_seconds)
            if self.ssl_context is not None:
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.shutdown_request(request)
                    return
                watch.sock = request  # the same descriptor, now owned by the TLS socket
                key = id(request)
            self.watches[key] = watch
            super().process_request_thread(request, client_address)
        finally:
            watch.cancel()
            self.watches.pop(key, None)
            self.slots.release()
            self._leave_peer(str(client_address[0]))


def _cached_app(registry: CollectorRegistry, seconds: float) -> Callable[..., Any]:
    """prometheus-client's WSGI app, rendering at most once per ``seconds`` for each format it negotiates.

    Rendering thousands of series holds the interpreter for a while; a hundred scrapers at
    once must cost what one costs, and the RPC threads must not wait for the other 99.
    Query strings (``name[]`` filters) are ignored, so they cannot be used to bypass the cache.
    """
    app = make_wsgi_app(registry)
    lock = threading.Lock()
    cache: dict[tuple[bool, bool], tuple[float, str, list[tuple[str, str]], bytes]] = {}

    def cached(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("REQUEST_METHOD") != "GET":
            return app(environ, start_response)
        key = (
            "application/openmetrics-text" in environ.get("HTTP_ACCEPT", ""),
            "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""),
        )
        with lock:  # one render at a time; the others wait for it and take its result
            found = cache.get(key)
            if found is None or time.monotonic() - found[0] >= seconds:
                rendered: dict[str, Any] = {}

                def keep(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
                    rendered.update(status=status, headers=headers)

                plain = {**environ, "QUERY_STRING": ""}
                body = b"".join(app(plain, keep))
                found = cache[key] = (time.monotonic(), rendered["status"], rendered["headers"], body)
        start_response(found[1], found[2])
        return [found[3]]

    return cached


class MetricsHTTPServer:
    """``/metrics`` (prometheus-client's WSGI app) on a bounded server; ``listen`` may use port 0 (see ``port``).

    With ``certfile`` and ``keyfile`` it serves HTTPS, and with ``client_cafile`` it
    requires a client certificate signed by that CA, as the gRPC server does. At most
    ``max_connections`` are served at once, at most ``max_per_peer`` of them from one peer
    address; each may stay silent ``timeout`` seconds, must complete its request (TLS
    handshake and headers) within ``request_timeout`` seconds and ends after
    ``connection_timeout`` seconds whatever it does. With ``cache_seconds``, a rendered scrape
    is served again for that long.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        listen: str,
        *,
        certfile: Path | None = None,
        keyfile: Path | None = None,
        client_cafile: Path | None = None,
        max_connections: int = MAX_HTTP_CONNECTIONS,
        timeout: float = HTTP_TIMEOUT_SECONDS,
        cache_seconds: float = 0.0,
        max_per_peer: int = MAX_HTTP_CONNECTIONS_PER_PEER,
        request_timeout: float = HTTP_REQUEST_SECONDS,
        connection_timeout: float = HTTP_CONNECTION_SECONDS,
    ) -> None:
        if not 0 < request_timeout <= connection_timeout:
            raise ValueError("request_timeout must be above 0 and at most connection_timeout")
        host, port = split_host_port(listen)
        app = _cached_app(registry, cache_seconds) if cache_seconds > 0 else make_wsgi_app(registry)

        class Server(_BoundedServer):
            pass

        class Handler(_QuietHandler):
            pass

        Handler.timeout = timeout
        Server.timeout_seconds = timeout
        Server.slots = threading.BoundedSemaphore(max_connections)
        Server.max_per_peer = max_per_peer
        Server.request_seconds = request_timeout
        Server.connection_seconds = connection_timeout
        Server.peers, Server.peers_lock, Server.watches = {}, threading.Lock(), {}
        Server.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        if certfile is not None and keyfile is not None:
            Server.ssl_context = _ssl_context(certfile, keyfile, client_cafile)
        self._httpd = make_server(host, port, app, Server, handler_class=Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="offsetstore-metrics", daemon=True)
        self._thread.start()
        self.host = host
        self.port: int = self._httpd.server_port
        self.scheme = "https" if certfile is not None else "http"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def shutdown(self) -> None:
        """Stops serving and closes the listening socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _ssl_context(certfile: Path, keyfile: Path, client_cafile: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certfile), str(keyfile))
    if client_cafile is not None:
        context.load_verify_locations(str(client_cafile))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def serve_http(
    registry: CollectorRegistry,
    listen: str,
    *,
    certfile: Path | None = None,
    keyfile: Path | None = None,
    client_cafile: Path | None = None,
    cache_seconds: float = 0.0,
) -> MetricsHTTPServer:
    """Serves ``registry`` on ``http(s)://listen/metrics`` until ``.shutdown()``."""
    return MetricsHTTPServer(
        registry,
        listen,
        certfile=certfile,
        keyfile=keyfile,
        client_cafile=client_cafile,
        cache_seconds=cache_seconds,
    )
