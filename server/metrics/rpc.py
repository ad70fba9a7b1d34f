"""The RPC side of the metrics: go-grpc-prometheus' ``grpc_server_*`` series and the store counters.

One path per call. An offset store call (gRPC or HTTP) is recorded by the gate's metrics
policy (:meth:`MetricsInterceptor.__call__`, outermost in the chain): its ``grpc_server_*``
series, its error by reason and limit (the typed error it ended with: a group quota, a
partition quota and a call limit are different label values, not one status code), and the
store counters from its request. The calls of the other services (health, reflection) are
recorded by the same object as a grpc.aio interceptor, from their final status code.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from prometheus_client import CollectorRegistry, Counter, Histogram

from offsetstore.core.calls import Counted
from offsetstore.server.call import OK, Call, Ended, ended_by
from offsetstore.server.interceptor import Behaviour, PolicyInterceptor, rpc_kind
from offsetstore.server.policy import Next
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = [
    "GRPC_CODES",
    "LATENCY_BUCKETS",
    "REJECTION_REASONS",
    "SERVICES",
    "STARTING_REASONS",
    "MethodMetrics",
    "MetricsInterceptor",
    "ServerMetrics",
]

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

# The reasons of a rejected commit whose series exist (at zero) from the start: the contract's
# three, and the quotas'. Any other reason a commit is refused with (the typed error's
# ErrorInfo reason, or its code's name) gets its series when it first happens.
REJECTION_REASONS: tuple[str, ...] = (
    "STALE_GENERATION",
    "OFFSET_MISMATCH",
    "INVALID_ARGUMENT",
    "GROUP_QUOTA",
    "PARTITION_QUOTA",
    "RESOURCE_EXHAUSTED",
)
#: The same for ``offsetstore_rpc_errors_total`` (each method's, with no limit named).
STARTING_REASONS = REJECTION_REASONS

# Store round trips are milliseconds; Prometheus' defaults start at 5 ms.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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
        self.errors = Counter(
            "offsetstore_rpc_errors",
            "offsetstore.v1 calls that ended in an error, by method, ErrorInfo reason and (for "
            "RESOURCE_EXHAUSTED) the limit that refused them: principal_calls, principal_bytes, "
            "history_rows, max_groups, max_partitions, message_bytes, streams.",
            ("grpc_method", "reason", "limit"),
            registry=registry,
        )
        self._methods: dict[str, MethodMetrics] = {}
        self._lock = threading.Lock()
        for service in services:
            for method in service.methods:
                kind = rpc_kind(method.client_streaming, method.server_streaming)
                self.method(f"/{service.full_name}/{method.name}", kind)
        for reason in REJECTION_REASONS:
            self.rejections.labels(reason)
        for method in _OFFSET_STORE.methods:
            for reason in STARTING_REASONS:
                self.errors.labels(method.name, reason, "")

    def method(self, full_method: str, kind: str) -> MethodMetrics:
        """The series of one method, created (every code at zero) on first use."""
        found = self._methods.get(full_method)
        if found is not None and found.kind == kind:
            return found
        with self._lock:
            service, _, name = full_method.lstrip("/").rpartition("/")
            labels = (kind, service, name)
            found = MethodMetrics(
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

    def record_outcome(self, call: Call, ended: Ended) -> None:
        """Counts one ended call of the offset store: its error by reason, and commits, rejections and resets."""
        code = ended.code
        if code != grpc.StatusCode.OK:
            self.errors.labels(call.method, ended.reason, ended.limit).inc()
        facts = call.facts  # what the call counts is declared in the .proto, never read off its name
        if facts.counted is Counted.COMMITS:
            if code == grpc.StatusCode.OK:
                self.commits.inc()
                self.offsets_committed.inc(len(call.entries))
            elif code != grpc.StatusCode.CANCELLED:
                self.rejections.labels(ended.reason).inc()
        elif facts.counted is Counted.RESETS and code == grpc.StatusCode.OK:
            if not call.previews:
                self.resets.inc()


@dataclass(frozen=True)
class MethodMetrics:
    kind: str
    started: Counter
    handled: dict[grpc.StatusCode, Counter]
    seconds: Histogram

    def done(self, code: grpc.StatusCode, started_at: float) -> None:
        self.handled.get(code, self.handled[grpc.StatusCode.UNKNOWN]).inc()
        self.seconds.observe(time.perf_counter() - started_at)


def _final_code(context: grpc.aio.ServicerContext[Any, Any], raised: bool) -> grpc.StatusCode:
    # abort()/abort_with_status() set the code and then raise; an exception without
    # a code set becomes UNKNOWN on the wire, and a return without one is OK.
    code: grpc.StatusCode | int | None = context.code()
    if isinstance(code, int):  # some grpc versions keep the raw integer
        code = next((c for c in grpc.StatusCode if c.value[0] == code), None)
    if code is None:
        return grpc.StatusCode.UNKNOWN if raised else grpc.StatusCode.OK
    return code


class MetricsInterceptor(PolicyInterceptor):
    """Records go-grpc-prometheus' server metrics for every call, and the store counters of the offset store's.

    The series are recorded before the response leaves the server, so a client that has
    its answer reads metrics that already count its call. The offset store's methods are
    counted by the gate's chain, of which this is the outermost policy (:meth:`__call__`),
    as the unary methods they are, whichever transport carried them; the other services'
    by the interceptor. Unknown methods are not wrapped (gRPC answers them UNIMPLEMENTED):
    no unbounded labels.
    """

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self._gated: dict[str, MethodMetrics] = {}

    async def __call__(self, call: Call, next: Next) -> Message:
        m = self._gated.get(call.method) or self._gated_method(call.method)
        m.started.inc()
        started_at = time.perf_counter()
        try:
            response = await next(call)
        except (Exception, asyncio.CancelledError) as error:
            ended = ended_by(error)
            self.metrics.record_outcome(call, ended)
            m.done(ended.code, started_at)
            raise
        self.metrics.record_outcome(call, OK)
        m.done(grpc.StatusCode.OK, started_at)
        return response

    def _gated_method(self, name: str) -> MethodMetrics:
        full = f"{self._GATED}{name}"
        found = self._gated[name] = self.metrics.method(full, self.metrics.kind_of(full) or "unary")
        return found

    def wrap_other(
        self, method: str, kind: str, handler: grpc.RpcMethodHandler[Any, Any], behaviour: Behaviour
    ) -> Behaviour:
        m = self.metrics.method(method, self.metrics.kind_of(method) or kind)
        if kind in ("unary", "client_stream"):
            return self._unary(m, behaviour)
        return self._streaming(m, behaviour)

    @staticmethod
    def _unary(m: MethodMetrics, behaviour: Behaviour) -> Behaviour:
        async def run(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            m.started.inc()
            started_at = time.perf_counter()
            raised: bool | None = True  # None: the call was cancelled, already counted
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
                    m.done(_final_code(context, bool(raised)), started_at)

        return run

    @staticmethod
    def _streaming(m: MethodMetrics, behaviour: Behaviour) -> Behaviour:
        async def run(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
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
