"""What a caller may not decide about traces (issue 47, L2): whether its calls are sampled, and what the spans say of its request.

- :class:`CallerBlindSampler`: a caller's ``traceparent`` with the sampled flag set made
  every call of it exported, whatever ``OTEL_TRACES_SAMPLER`` said (50 of 50 anonymous calls
  at a ratio of 0), in a trace id it chose. A remote parent that asks to be sampled is now
  decided by the operator's sampler as a new trace would be, on a keyed hash of its trace id
  (so that no chosen id falls under a ratio); the caller's trace id is kept, and a caller can
  still ask for less (a not-sampled parent is the configured sampler's, as before). Unless
  the operator trusts callers (``serve --trace-trust-callers``).
- :class:`NoQueryInSpans`: a Connect GET carries its request message in the query string,
  which aiohttp's instrumentation put in the HTTP span's URL attributes; they keep the path only.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

__all__ = ["CallerBlindSampler", "NoQueryInSpans", "StatementNames", "statement_name"]

#: The span attributes of aiohttp's instrumentation (old and new HTTP conventions) that hold a URL or its query.
_URL_KEYS = ("http.target", "http.url", "url.full")
_QUERY_KEYS = ("url.query",)


class CallerBlindSampler(Sampler):
    """The operator's sampler, which a caller's sampled flag cannot raise (see the module docstring)."""

    def __init__(self, configured: Sampler, *, trust_callers: bool = False) -> None:
        self.configured = configured
        self.trust_callers = trust_callers
        self._key = os.urandom(16)  # per process: no caller can compute which trace ids pass

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if self.trust_callers or not (parent.is_valid and parent.is_remote and parent.trace_flags.sampled):
            return self.configured.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        digest = hashlib.blake2b(trace_id.to_bytes(16, "big"), key=self._key, digest_size=16).digest()
        decided = self.configured.should_sample(None, int.from_bytes(digest, "big"), name, kind, attributes, links)
        return SamplingResult(decided.decision, decided.attributes, parent.trace_state)

    def get_description(self) -> str:
        trusted = "trusting callers" if self.trust_callers else "blind to callers' sampled flag"
        return f"CallerBlindSampler{{{self.configured.get_description()}, {trusted}}}"


class NoQueryInSpans(SpanProcessor):
    """Cuts the query string off a span's URL attributes as it starts (it may hold a Connect GET's request)."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        found: Any = span.attributes or {}
        for key in _URL_KEYS:
            value = found.get(key)
            if isinstance(value, str) and "?" in value:
                span.set_attribute(key, value.partition("?")[0])
        for key in _QUERY_KEYS:
            if found.get(key):
                span.set_attribute(key, "")


#: The span attributes psycopg's instrumentation puts a statement's text in (old and new conventions).
_STATEMENT_KEYS = ("db.statement", "db.query.text")


def statement_name(statement: str) -> str:
    """A statement span's name: its first keyword, upper-cased (``BEGIN; SELECT ...`` -> ``BEGIN``); ``ping`` for none."""
    words = statement.replace(";", " ").split()
    return words[0].upper() if words else "ping"


class StatementNames(SpanProcessor):
    """Names each statement span by its statement's first keyword, then hands it to ``exporting`` (its export processor).

    psycopg's instrumentation names a span by the statement's first token before the statement
    is on the span: ``BEGIN;`` for the write path's one simple query ``BEGIN; SELECT
    set_config(...)``, ``select`` and ``show`` for SQLAlchemy's first-connect queries, and, for
    the pool's empty liveness check (``""``, ``;``), the database's name. An ended span cannot
    be renamed, so this names the copy it exports instead.
    """

    def __init__(self, exporting: SpanProcessor) -> None:
        self.exporting = exporting

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.exporting.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        statement = next((value for key in _STATEMENT_KEYS if isinstance(value := attributes.get(key), str)), "")
        name = statement_name(statement)
        if name != span.name:
            span = ReadableSpan(
                name,
                context=span.context,
                parent=span.parent,
                resource=span.resource,
                attributes=span.attributes,
                events=span.events,
                links=span.links,
                kind=span.kind,
                status=span.status,
                start_time=span.start_time,
                end_time=span.end_time,
                instrumentation_scope=span.instrumentation_scope,
            )
        self.exporting.on_end(span)

    def shutdown(self) -> None:
        self.exporting.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporting.force_flush(timeout_millis)
