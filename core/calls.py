"""The facts of each offsetstore.v1 RPC, read once from the service descriptor (proto/offsetstore/v1/options.proto).

What a call needs (permission, scope), what it costs, what it may do to groups and
partitions, and whether a client may retry it live beside the RPC in the .proto; the
server's gate, quotas and metrics and both clients read them here, keyed by the method's
name. A method without its facts fails at import (and in tests/core/test_calls.py)::

    >>> FACTS["CommitOffsets"].permission
    <Permission.COMMIT: 2>
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.descriptor_pb2 import MethodOptions

from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import options_pb2

__all__ = ["BY_REQUEST", "FACTS", "SERVICE", "CallFacts", "Cost", "Counted", "Permission", "Scan", "Scope", "facts_of"]

#: The service whose methods the facts describe.
SERVICE: ServiceDescriptor = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]


class Permission(enum.IntEnum):
    """What a grant allows; each level includes the ones below it."""

    READ = options_pb2.PERMISSION_READ
    COMMIT = options_pb2.PERMISSION_COMMIT
    ADMIN = options_pb2.PERMISSION_ADMIN


class Scope(enum.Enum):
    """What a call's permission is checked against."""

    GROUP = options_pb2.SCOPE_GROUP  # the request's group_id
    PREFIX = options_pb2.SCOPE_PREFIX  # every group starting with the request's prefix
    TOPICS = options_pb2.SCOPE_TOPICS  # every topic of the request's watermarks


class Cost(enum.Enum):
    """How a call is weighed before it runs; see offsetstore.server.admission.cost_of."""

    ONE = options_pb2.COST_RULE_ONE
    ENTRIES = options_pb2.COST_RULE_ENTRIES
    SELECTION = options_pb2.COST_RULE_SELECTION
    PAGE = options_pb2.COST_RULE_PAGE


class Counted(enum.Enum):
    """The store counters a call feeds when it ends (the metrics read it, never a method's name)."""

    NOTHING = options_pb2.COUNTED_UNSPECIFIED
    COMMITS = options_pb2.COUNTED_COMMITS
    RESETS = options_pb2.COUNTED_RESETS


class Scan(enum.Enum):
    """What a call reads beyond its page (the admission weighs it by that: server/scan_cost.py)."""

    NOTHING = options_pb2.SCAN_UNSPECIFIED
    GROUP = options_pb2.SCAN_GROUP  # every partition of the request's group_id
    PREFIX = options_pb2.SCAN_PREFIX  # every partition of the groups of the request's page
    VERDICT = options_pb2.SCAN_GROUP_VERDICT  # GROUP, unless a kept verdict serves the first page


@dataclass(frozen=True)
class CallFacts:
    """One RPC's facts (the ``offsetstore.v1.call`` method option and ``idempotency_level``)."""

    method: str
    permission: Permission
    scope: Scope
    cost: Cost
    #: The request field the cost rule reads ("" for none).
    cost_field: str
    creates_group: bool
    adds_partitions: bool
    appends_history: bool
    removes_groups: bool
    #: "dry_run" (the call previews when it is true), "!execute" (previews when false), or "".
    preview_field: str
    #: For a write whose answer never came: how to find out what it did ("" for a read).
    unknown_outcome: str
    #: The repeated field of the partitions the call writes, an entry each ("" for none): empty, it writes none.
    entries_field: str
    #: The store counters the call feeds.
    counted: Counted
    #: What the call reads beyond its page.
    scan: Scan
    #: The request field that, set, makes the call scan nothing (a later page); "" for none.
    scan_skipped_by: str
    #: NO_SIDE_EFFECTS or IDEMPOTENT: a client retries it on UNAVAILABLE.
    retried: bool
    #: NO_SIDE_EFFECTS: a read; a GET may serve it.
    read_only: bool

    def previews(self, request: Any) -> bool:
        """Whether ``request`` of this method only previews (a dry run): it changes nothing."""
        field = self.preview_field
        if not field:
            return False
        if field.startswith("!"):
            return not getattr(request, field[1:])
        return bool(getattr(request, field))

    def entries(self, request: Any) -> Sequence[Any]:
        """The entries ``request`` writes (a commit's offsets); empty for a method without ``entries_field``."""
        return getattr(request, self.entries_field) if self.entries_field else ()

    def scans(self, request: Any) -> Scan:
        """What ``request`` of this method reads beyond its page: ``scan``, unless ``scan_skipped_by`` is set in it."""
        if self.scan_skipped_by and getattr(request, self.scan_skipped_by):
            return Scan.NOTHING
        return self.scan

    def writes(self, request: Any) -> bool:
        """Whether ``request`` may change the store: a write that is not a preview."""
        return not self.read_only and not self.previews(request)


# The generated stub types the extension as a plain FieldDescriptor, which Extensions[] refuses.
_CALL: Any = options_pb2.call


# The request fields each scan reads (server/scan_cost.py).
_SCANNED = {
    options_pb2.SCAN_GROUP: ("group_id",),
    options_pb2.SCAN_GROUP_VERDICT: ("group_id", "page_size"),
    options_pb2.SCAN_PREFIX: ("prefix", "page_size", "page_token"),
}


def facts_of(method: MethodDescriptor) -> CallFacts:
    """The facts ``method`` declares; ValueError when it declares none (or an incomplete set)."""
    options = method.GetOptions()
    if not options.HasExtension(_CALL):
        raise ValueError(f"{method.full_name} declares no (offsetstore.v1.call) option: see DEVELOPERS.md")
    call: options_pb2.CallFacts = options.Extensions[_CALL]
    if not (call.permission and call.scope and call.cost):
        raise ValueError(f"{method.full_name}'s (offsetstore.v1.call) option needs permission, scope and cost")
    request = method.input_type
    for name in (call.cost_field, call.preview_field.lstrip("!"), call.entries_field, call.scan_skipped_by):
        if name and name not in request.fields_by_name:
            raise ValueError(f"{method.full_name}'s option names {name!r}, which {request.name} does not have")
    if call.cost == options_pb2.COST_RULE_SELECTION and "topics" not in request.fields_by_name:
        raise ValueError(f"{method.full_name} costs by selection, but {request.name} has no topics")
    if call.cost in (options_pb2.COST_RULE_ENTRIES, options_pb2.COST_RULE_PAGE) and not call.cost_field:
        raise ValueError(f"{method.full_name}'s cost rule needs cost_field")
    scanned = _SCANNED.get(call.scan, ())
    if not set(scanned) <= set(request.fields_by_name):
        raise ValueError(f"{method.full_name} scans by {Scan(call.scan).name}, which reads {', '.join(scanned)}")
    level = options.idempotency_level
    writes = level != MethodOptions.NO_SIDE_EFFECTS
    if writes and level != MethodOptions.IDEMPOTENT and not call.unknown_outcome:
        raise ValueError(f"{method.full_name} is a write that may not be retried: it needs unknown_outcome")
    return CallFacts(
        method=method.name,
        permission=Permission(call.permission),
        scope=Scope(call.scope),
        cost=Cost(call.cost),
        cost_field=call.cost_field,
        creates_group=call.creates_group,
        adds_partitions=call.adds_partitions,
        appends_history=call.appends_history,
        removes_groups=call.removes_groups,
        preview_field=call.preview_field,
        unknown_outcome=call.unknown_outcome,
        entries_field=call.entries_field,
        counted=Counted(call.counted),
        scan=Scan(call.scan),
        scan_skipped_by=call.scan_skipped_by,
        retried=level in (MethodOptions.NO_SIDE_EFFECTS, MethodOptions.IDEMPOTENT),
        read_only=not writes,
    )


#: Every method of the service, by name (``"CommitOffsets"``).
FACTS: Mapping[str, CallFacts] = MappingProxyType({m.name: facts_of(m) for m in SERVICE.methods})
#: The same, by request message name (``"CommitOffsetsRequest"``): what a client knows of a call.
BY_REQUEST: Mapping[str, CallFacts] = MappingProxyType({m.input_type.name: FACTS[m.name] for m in SERVICE.methods})
