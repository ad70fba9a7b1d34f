"""Tracing on (imported by :mod:`offsetstore.server.tracing` only then): the SDK, its instrumentations, the call spans.

- A span of every gRPC call, named ``offsetstore.v1.OffsetStoreService/CommitOffsets`` (the
  RPC semantic conventions), child of the caller's context carried in its metadata (W3C
  ``traceparent`` by default, ``OTEL_PROPAGATORS``), with the call's principal, group,
  outcome (the status code's name) and reason (the error's ``ErrorInfo.reason``). Whether
  it is sampled is the operator's sampler's: a caller's sampled flag cannot raise it
  (:mod:`._otel_policy`), and no span's URL holds a query string.
- The HTTP listener's requests get aiohttp's instrumentation (a server span per request, its
  ``traceparent`` honoured); an RPC over HTTP passes the same interceptors, so its call span,
  with the same attributes, is a child of the request's.
- Every database statement of a call, by psycopg's instrumentation (``db.statement`` is the SQL
  text, never its parameters): a child of the call whose task runs it, or of its group
  commit's span, named by the statement's first keyword (``SELECT``, ``BEGIN``; ``ping`` for the
  pools' empty liveness check). Statements outside any call (the health check's ping) are not traced.
- Log records made inside a span carry ``trace_id`` and ``span_id``, so the JSON (and
  key=value) log lines do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.aiohttp_server import AioHttpServerInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from offsetstore.runtime.async_store import Carry
from offsetstore.server._otel_policy import CallerBlindSampler, NoQueryInSpans, StatementNames
from offsetstore.server.call import OK, Call, Ended, ended_by
from offsetstore.server.interceptor import Behaviour, PolicyInterceptor
from offsetstore.server.policy import Next

__all__ = ["CallTracer", "install"]

#: The span of a group commit's transaction (one for the callers whose requests it writes).
WRITE_BATCH = "offsetstore write batch"

log = logging.getLogger(__name__)

# The attributes this server adds to a call's span, beside the rpc.* of the conventions.
PRINCIPAL = "offsetstore.principal"
GROUP = "offsetstore.group"
OUTCOME = "offsetstore.outcome"
REASON = "offsetstore.reason"

# Server spans are errors only for these codes (the RPC semantic conventions): a refused
# commit is the server doing its job, not a failure of the server.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_DETAILS_KEY = "grpc-status-details-bin"


def install(*, trust_callers: bool = False) -> tuple[CallTracer, Carry]:
    """Sets the SDK up from the environment, instruments psycopg and aiohttp; the call interceptor and the batches' carry.

    ``trust_callers``: a caller's sampled flag is honoured as is (else it cannot raise sampling:
    :mod:`._otel_policy`).
    """
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    configured = TracerProvider(resource=resource, shutdown_on_exit=False).sampler  # OTEL_TRACES_SAMPLER's
    provider = TracerProvider(resource=resource, sampler=CallerBlindSampler(configured, trust_callers=trust_callers))
    provider.add_span_processor(NoQueryInSpans())  # first: before any processor exports the span
    # Statements are traced as parts of calls only: the health check's ping every second, a
    # trace of its own each time, would be most of what is exported.
    statements = TracerProvider(resource=resource, sampler=ParentBased(ALWAYS_OFF), shutdown_on_exit=False)
    exporters = _exporters()
    for exporter, _ in exporters:
        processor = BatchSpanProcessor(exporter)  # OTEL_BSP_*
        provider.add_span_processor(processor)
        statements.add_span_processor(StatementNames(processor))  # each named by its statement's keyword
    trace.set_tracer_provider(provider)
    PsycopgInstrumentor().instrument(tracer_provider=statements)
    AioHttpServerInstrumentor().instrument(tracer_provider=provider)
    _trace_ids_in_log_records()
    tracer = trace.get_tracer("offsetstore.server", tracer_provider=provider)
    service = resource.attributes.get("service.name", "")
    where = ", ".join(place for _, place in exporters) or "nowhere (OTEL_TRACES_EXPORTER names none)"
    log.info("traces on: exporting to %s as service %s", where, service, extra={"traces": where, "service": service})
    return CallTracer(tracer), Carry(capture=otel_context.get_current, enter=_batch_span(tracer))


def _batch_span(tracer: trace.Tracer) -> Callable[[list[object]], contextlib.AbstractContextManager[object]]:
    """A group commit's span: a child of its first traced caller's, linked to the others'.

    A batch writes the requests of several calls in one transaction (in a task of its own),
    so its statements, children of this span, are in the first caller's trace, and the
    other callers' spans are its links.
    """

    @contextlib.contextmanager
    def enter(carried: list[object]) -> Iterator[object]:
        contexts = [c for c in carried if isinstance(c, otel_context.Context)]
        callers = [c for c in contexts if trace.get_current_span(c).get_span_context().is_valid]
        links = [Link(trace.get_current_span(c).get_span_context()) for c in callers[1:]]
        with tracer.start_as_current_span(
            WRITE_BATCH,
            context=callers[0] if callers else None,
            kind=SpanKind.INTERNAL,
            links=links,
            attributes={"offsetstore.batch.requests": len(carried)},
        ) as span:
            yield span

    return enter


def _exporters() -> list[tuple[SpanExporter, str]]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``), found as the SDK finds them: by entry point.

    ``otlp`` is the OTLP exporter of ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` when unset, as in the SDK). Each comes with where
    it sends the spans, for the start-up line.
    """
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    ).strip()
    otlp = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
    exporters = []
    for name in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        name = name.strip().lower()
        if name in ("", "none"):
            continue
        if name == "otlp":
            if protocol not in otlp:
                raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not one of {', '.join(otlp)}")
            name = otlp[protocol]
        found = entry_points(group="opentelemetry_traces_exporter", name=name)
        if not found:
            raise ValueError(f"no OpenTelemetry traces exporter {name!r} is installed (OTEL_TRACES_EXPORTER)")
        exporters.append((next(iter(found)).load()(), _destination(name, protocol)))
    return exporters


def _destination(name: str, protocol: str) -> str:
    """Where exporter ``name`` sends spans, read from the variables the SDK reads (and its defaults)."""
    if name == "console":
        return "the console (standard output)"
    if not name.startswith("otlp"):
        return f"the {name} exporter"
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if protocol == "grpc":
        return f"OTLP/gRPC at {endpoint or os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT') or 'http://localhost:4317'}"
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return (
        f"OTLP/HTTP at {endpoint or (base.rstrip('/') + '/v1/traces' if base else 'http://localhost:4318/v1/traces')}"
    )


def _trace_ids_in_log_records() -> None:
    make = logging.getLogRecordFactory()

    def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = make(*args, **kwargs)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            made.trace_id = format(context.trace_id, "032x")
            made.span_id = format(context.span_id, "016x")
        return made

    logging.setLogRecordFactory(record)


class CallTracer(PolicyInterceptor):
    """A span around every call this server serves, gRPC or HTTP (see the module docstring).

    The offset store's calls are traced as a policy of the gate (:meth:`__call__`), the other
    services' by the interceptor.
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self._gated: dict[str, tuple[str, dict[str, str]]] = {}

    async def __call__(self, call: Call, next: Next) -> Message:
        named = self._gated.get(call.method)
        if named is None:
            service = self._GATED.strip("/")
            named = self._gated[call.method] = (
                f"{service}/{call.method}",
                {"rpc.service": service, "rpc.method": call.method},
            )
        failed: Exception | None = None
        with self._start(*named, call.transport) as span:
            try:
                response = await next(call)
            except asyncio.CancelledError as error:
                _ended(span, call, ended_by(error))  # the caller went away
                raise
            except Exception as error:
                # Raised past the span, not through it: a refusal is the server doing its job,
                # and _ended() says which codes make the span an error.
                _ended(span, call, ended_by(error))
                failed = error
            else:
                _ended(span, call, OK)
        if failed is not None:
            raise failed
        return response

    def wrap_other(
        self, method: str, kind: str, handler: grpc.RpcMethodHandler[Any, Any], behaviour: Behaviour
    ) -> Behaviour | None:
        service, _, name = method.lstrip("/").partition("/")
        attributes = {"rpc.service": service, "rpc.method": name}
        if handler.response_streaming:
            return self._stream(f"{service}/{name}", attributes, behaviour)
        return self._unary(f"{service}/{name}", attributes, behaviour)

    def _start(self, name: str, attributes: dict[str, str], context: Any) -> Any:
        if trace.get_current_span().get_span_context().is_valid:
            # Inside the HTTP request's span (aiohttp's instrumentation): this call is a part of it.
            return self.tracer.start_as_current_span(
                name, kind=SpanKind.INTERNAL, attributes={**attributes, "rpc.system": "connect_rpc"}
            )
        carrier = {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}
        return self.tracer.start_as_current_span(
            name,
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={**attributes, "rpc.system": "grpc"},
        )

    def _unary(
        self, name: str, attributes: dict[str, str], behaviour: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: Any) -> Any:
            with self._start(name, attributes, context) as span:
                try:
                    response = await behaviour(request, context)
                except asyncio.CancelledError:
                    _finish(span, context, grpc.StatusCode.CANCELLED)  # the caller went away
                    raise
                _finish(span, context)
                return response

        return call

    def _stream(
        self, name: str, attributes: dict[str, str], behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            with self._start(name, attributes, context) as span:
                try:
                    async for response in behaviour(request, context):
                        yield response
                except asyncio.CancelledError:
                    _finish(span, context, grpc.StatusCode.CANCELLED)
                    raise
                _finish(span, context)

        return call


def _ended(span: trace.Span, call: Call, ended: Ended) -> None:
    """An offset store call's span, as it ends: who made it, for which group, how it ended."""
    if call.caller is not None:
        span.set_attribute(PRINCIPAL, call.caller)
    if call.group:
        span.set_attribute(GROUP, call.group)
    code = ended.code
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    span.set_attribute(OUTCOME, code.name)
    if code is grpc.StatusCode.OK:
        return
    reason = ended.error.reason if ended.error is not None else ""
    if reason:
        span.set_attribute(REASON, reason)
    if code in _SERVER_ERRORS:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}{': ' + reason if reason else ''}"))


def _finish(span: trace.Span, context: Any, ended: grpc.StatusCode | None = None) -> None:
    code = ended or context.code()
    if isinstance(code, int):
        code = _CODES.get(code, grpc.StatusCode.UNKNOWN)
    code = code or grpc.StatusCode.OK
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    span.set_attribute(OUTCOME, code.name)
    if code is grpc.StatusCode.OK:
        return
    reason = _reason(context.trailing_metadata() or ())
    if reason:
        span.set_attribute(REASON, reason)
    if code in _SERVER_ERRORS:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}{': ' + reason if reason else ''}"))


def _reason(trailing: Sequence[tuple[str, Any]]) -> str | None:
    """The ``ErrorInfo.reason`` of the rich status the call ended with (status.fail() put it in the trailers)."""
    for key, value in trailing:
        if key != _DETAILS_KEY:
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return info.reason or None
    return None
