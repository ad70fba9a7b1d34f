"""One offsetstore.v1 call as every policy of the gate sees it: its facts, its transport, its caller, its request.

A transport adapter (gRPC: :mod:`offsetstore.server.gate`; HTTP: :mod:`offsetstore.server.http.connect`)
makes a :class:`Call` from what it knows before a byte of the request is read, and hands
it to the chain of policies (:mod:`offsetstore.server.policy`); each fills in what it
decides (who calls, the request once read, what its scan costs) for the ones after it.

A policy reads the request through the accessors below, each backed by a fact of the RPC
(:mod:`offsetstore.core.calls`) and a field checked against the method's request message
at import: no policy guesses a message's shape from an unrelated fact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

import grpc
from google.protobuf.message import Message

from offsetstore.core.calls import FACTS, SERVICE, CallFacts, Cost, Scan, Scope
from offsetstore.core.errors import OffsetStoreError
from offsetstore.server.auth.callers import Metadata
from offsetstore.server.auth.principals import Principal
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = ["CANCELLED", "OK", "Call", "Ended", "Metadata", "Transport", "ended_by"]


class Transport(Protocol):
    """What a transport tells the gate about one call (a gRPC call, an HTTP request)."""

    def invocation_metadata(self) -> Metadata | None:
        """The call's metadata (HTTP: its headers, lower-cased)."""

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        """The verified client certificate's names under gRPC's keys (``x509_common_name``, ``peer_uri``)."""

    def peer(self) -> str:
        """``ipv4:HOST:PORT`` or ``ipv6:[HOST]:PORT``, as gRPC names a peer."""

    def time_remaining(self) -> float | None:
        """Seconds left of the caller's deadline; None without one."""

    def active(self) -> bool:
        """False once the caller is gone (cancelled, disconnected) or the call is over."""

    async def message(self) -> bytes | None:
        """The request message, binary (an HTTP body is converted); None when the call carries none."""


# The request field each scope's permission is checked against (the topics of a report are
# its watermarks'); every method's request is checked to have it below, at import.
_SCOPE_FIELDS = {Scope.GROUP: "group_id", Scope.PREFIX: "prefix", Scope.TOPICS: "watermarks"}


def _check_fields() -> None:
    for name, facts in FACTS.items():
        request = SERVICE.methods_by_name[name].input_type
        needed = {_SCOPE_FIELDS[facts.scope]}
        if facts.cost is Cost.SELECTION or (facts.adds_partitions and not facts.entries_field):
            needed.add("topics")  # a selection (TopicSelection: topic, partitions)
        if facts.removes_groups and facts.scope is Scope.GROUP:
            needed.add("all_topics")
        missing = needed - set(request.fields_by_name)
        if missing:
            raise ValueError(f"{name}'s facts need {', '.join(sorted(missing))}, which {request.name} does not have")


_check_fields()

# The methods whose request has a topic selection (``topics``).
_SELECTING = frozenset(m.name for m in SERVICE.methods if "topics" in m.input_type.fields_by_name)


@dataclass(slots=True)
class Call:
    """Made by a transport adapter, completed by the policies in their order; see the module docstring.

    ``Call(facts, request)`` alone is a call already read, as a policy's test makes one.
    """

    facts: CallFacts
    #: The decoded request (its class is the method's input type); None until the read policy has read it.
    request: Message | None = None
    #: The authenticated principal's name; None without authentication.
    principal: str | None = None
    #: The partitions the request carries in its largest costly field, counted on the wire
    #: before it was decoded (:mod:`offsetstore.server.wire`): it costs no less.
    carried: int = 0
    #: Where the call came from; None for a call made outside a transport (a policy's test).
    transport: Transport | None = field(default=None, repr=False)
    #: Whom admission counts the call against: the principal, or without authentication the peer's address.
    caller: str | None = None
    #: The authenticated principal, with its grants; None without authentication.
    identity: Principal | None = None
    #: The partitions an aggregating read scans beyond its page (the scan cost policy counts them).
    scanned: int = 0

    @property
    def method(self) -> str:
        return self.facts.method

    def peer(self) -> str:
        """The caller's address as gRPC names it (``ipv4:HOST:PORT``); "" for a call made outside a transport."""
        return self.transport.peer() if self.transport is not None else ""

    @property
    def message(self) -> Message:
        """The decoded request; RuntimeError before it was read (a policy placed before the read)."""
        if self.request is None:
            raise RuntimeError(f"the {self.method} request is read later in the chain")
        return self.request

    # --- what the request names, by the method's declared scope ---
    @property
    def scope(self) -> str:
        """What the call's permission is checked on: its group id, or its prefix (a prefix RPC); "" for topics."""
        return "" if self.facts.scope is Scope.TOPICS else self._text(_SCOPE_FIELDS[self.facts.scope])

    @property
    def group(self) -> str:
        """The request's ``group_id`` ("" for a method without one, or before the request is read)."""
        request = self.request
        if request is None:
            return ""
        value = getattr(request, "group_id", "")
        return value if isinstance(value, str) else ""

    @property
    def prefix(self) -> str:
        """The group prefix a prefix RPC (ListGroups, ExpireGroups) covers."""
        return self._text("prefix")

    def _field(self, name: str) -> object:
        return getattr(self.message, name)  # a name checked against the request at import (_check_fields)

    def _text(self, name: str) -> str:
        value = self._field(name)
        assert isinstance(value, str)
        return value

    def _int(self, name: str) -> int:
        value = self._field(name)
        assert isinstance(value, int)
        return value

    # --- every list that costs, typed ---
    @property
    def watermarks(self) -> Sequence[pb.Watermark]:
        """A report's watermarks (empty for any other method)."""
        if self.facts.scope is not Scope.TOPICS:
            return ()
        return cast("Sequence[pb.Watermark]", self._field("watermarks"))

    @property
    def reported_topics(self) -> list[str]:
        """The distinct topics a report names, sorted."""
        return sorted({w.topic for w in self.watermarks})

    @property
    def reported_partitions(self) -> list[tuple[str, int]]:
        """The distinct (topic, partition) pairs a report names, sorted."""
        return sorted({(w.topic, w.partition) for w in self.watermarks})

    @property
    def selection(self) -> Sequence[pb.TopicSelection]:
        """The request's ``topics`` selection (empty for a method without one)."""
        if self.facts.method not in _SELECTING:
            return ()
        return cast("Sequence[pb.TopicSelection]", self._field("topics"))

    @property
    def entries(self) -> Sequence[pb.OffsetCommit]:
        """The entries the call writes, a partition each (a commit's offsets); empty for a method without any."""
        return cast("Sequence[pb.OffsetCommit]", self.facts.entries(self.message))

    @property
    def costed(self) -> int:
        """The length of the list the cost rule weighs (``cost_field`` of an ENTRIES rule), or the page size it reads."""
        name = self.facts.cost_field
        if not name:
            return 0
        value = self._field(name)
        return value if isinstance(value, int) else len(cast("Sequence[object]", value))

    @property
    def all_topics(self) -> bool:
        """A delete of the whole group."""
        return bool(getattr(self.message, "all_topics", False))

    # --- what the request does, by the method's facts ---
    @property
    def previews(self) -> bool:
        """The call only previews (a dry run): it changes nothing."""
        return self.facts.previews(self.message)

    @property
    def scan(self) -> Scan:
        """What the call reads beyond its page (NOTHING for a later page of a scanning read)."""
        return self.facts.scans(self.message)

    @property
    def page_size(self) -> int:
        """The request's ``page_size`` (a scan that reads it: :data:`~offsetstore.core.calls.Scan`)."""
        return self._int("page_size")

    def page(self) -> tuple[str, int, str]:
        """(prefix, page_size, page_token) of a prefix scan (ListGroups)."""
        return self.prefix, self._int("page_size"), self._text("page_token")


@dataclass(frozen=True, slots=True)
class Ended:
    """How a call ended, as the policies that observe it (metrics, tracing, the log) name it."""

    code: grpc.StatusCode
    #: The typed error the call ended with; None for a success, a crash (INTERNAL) or a cancel.
    error: OffsetStoreError | None = None

    @property
    def reason(self) -> str:
        """The ErrorInfo reason ("" for OK); a failure without a typed error is named by its code."""
        if self.error is not None and self.error.reason:
            return self.error.reason
        return "" if self.code == grpc.StatusCode.OK else self.code.name

    @property
    def limit(self) -> str:
        """Which limit refused the call (``principal_calls``, ``max_groups``...; see the errors' metadata), or ""."""
        return self.error.metadata.get("limit", "") if self.error is not None else ""


#: The ending of every successful call.
OK = Ended(grpc.StatusCode.OK)
#: A call whose caller went away.
CANCELLED = Ended(grpc.StatusCode.CANCELLED)


def ended_by(error: BaseException) -> Ended:
    """How a call that raised ``error`` ended: its typed error's code, else INTERNAL (CancelledError: CANCELLED)."""
    if isinstance(error, OffsetStoreError):
        return Ended(error.code, error)
    if isinstance(error, asyncio.CancelledError):
        return CANCELLED
    return Ended(grpc.StatusCode.INTERNAL)
