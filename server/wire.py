"""A request's partitions counted on the wire, so that an oversized one is refused before it is decoded.

Decoding is what costs: a 40 MB CommitOffsets of empty entries is 20 million messages (over
4 GB once decoded and converted), a 47 MB adoption list (``ResetOffsets.to_offsets``) 4.5
million, however quickly the 10,000-partition limit refuses them afterwards. What counts is
declared in the .proto, beside each repeated field of a request (the ``entry_cost`` field
option, proto/offsetstore/v1/options.proto): an entry is one partition, or as many as its
own repeated fields count (a topic selection). The plan of each request is read from its
descriptor once, and a repeated field without a declared cost fails the server at import
(and tests/server/test_wire_costs.py), so that the next new field cannot slip past.

The count walks the serialized request's fields (a length prefix lets it skip an entry
without reading it), descending into the messages that hold a costly field (a selection, the
adoption list), and counts packed partitions with one C-speed pass over their bytes. It gives
up as soon as a field's count passes the limit, or the fields walked pass what a request of
that many partitions holds, so what it costs is bounded by the limit, not by the request's
size: a valid request of 10,000 entries is 10,000 steps, a hostile one no more.

What counts is what the storage core's checks count (:mod:`offsetstore.storage.validate`):
each costly field on its own (an adoption's selection and its list name the same partitions),
and the call is weighed by the largest (:attr:`offsetstore.server.call.Call.carried`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from offsetstore.core.calls import SERVICE
from offsetstore.core.errors import InvalidArgumentError
from offsetstore.storage.validate import MAX_PARTITIONS
from offsetstore.v1 import options_pb2

__all__ = ["MalformedError", "check_entries", "count_entries", "plan", "undeclared"]

#: Fields a request may carry besides its entries (its group id, generation, ...): well above
#: what any message of the service has, so that only repeats reach the budget.
SLACK_FIELDS = 64
#: Fields walked per partition of the limit: a selection of one partition is three (the
#: entry, its topic, its partitions), and an adoption carries its partitions twice.
FIELDS_PER_PARTITION = 5

# The varint ends at a byte below 0x80: deleting the others leaves one byte per varint.
_CONTINUATION = bytes(range(0x80, 0x100))

# The generated stub types the extension as a plain FieldDescriptor, which Extensions[] refuses.
_ENTRY_COST: Any = options_pb2.entry_cost

_FIXED_WIDTH = {
    FieldDescriptor.TYPE_FIXED32: 4,
    FieldDescriptor.TYPE_SFIXED32: 4,
    FieldDescriptor.TYPE_FLOAT: 4,
    FieldDescriptor.TYPE_FIXED64: 8,
    FieldDescriptor.TYPE_SFIXED64: 8,
    FieldDescriptor.TYPE_DOUBLE: 8,
}


class MalformedError(ValueError):
    """The bytes are not a protobuf message (a truncated field, a bad wire type)."""


class _Kind(enum.Enum):
    PARTITION = options_pb2.ENTRY_COST_PARTITION  # each entry one partition, unread
    CONTENTS = options_pb2.ENTRY_COST_CONTENTS  # each entry what its costly fields count, at least 1
    MESSAGE = 0  # a singular message holding costly fields: walked, its fields counted on their own


@dataclass(frozen=True)
class _Costly:
    path: str  # from the request: "topics", "to_offsets.offsets"
    name: str  # the field's own name
    kind: _Kind
    width: int | None = None  # a scalar's bytes in a packed run (0: a varint); None for a message
    inner: Mapping[int, _Costly] = field(default_factory=dict)  # CONTENTS and MESSAGE: what is walked inside


def _declared(f: FieldDescriptor) -> int:
    options = f.GetOptions()
    return options.Extensions[_ENTRY_COST] if options.HasExtension(_ENTRY_COST) else 0


def undeclared(descriptor: Descriptor) -> list[str]:
    """The repeated fields reachable from ``descriptor`` (nested messages included) that declare no cost."""
    found: list[str] = []
    seen: set[str] = set()

    def visit(d: Descriptor) -> None:
        if d.full_name in seen:
            return
        seen.add(d.full_name)
        for f in d.fields:
            if f.is_repeated and not _declared(f):
                found.append(f.full_name)
            if f.message_type is not None:
                visit(f.message_type)

    visit(descriptor)
    return found


def _plan_of(descriptor: Descriptor, prefix: str = "", depth: int = 0) -> dict[int, _Costly]:
    """What to walk of a ``descriptor`` message, by field number: its costly fields and the messages holding some."""
    if depth > 8:
        raise ValueError(f"{descriptor.full_name} nests too deep (a recursive message) to be counted on the wire")
    plan: dict[int, _Costly] = {}
    for f in descriptor.fields:
        path = prefix + f.name
        if f.is_repeated:
            kind = _Kind(_declared(f))
            if kind is _Kind.CONTENTS:
                if f.message_type is None:
                    raise ValueError(f"{f.full_name}: ENTRY_COST_CONTENTS is for a repeated message")
                plan[f.number] = _Costly(path, f.name, kind, inner=_plan_of(f.message_type, path + ".", depth + 1))
            else:
                if f.message_type is not None and any(g.is_repeated for g in f.message_type.fields):
                    raise ValueError(f"{f.full_name}: its entries hold repeated fields; declare ENTRY_COST_CONTENTS")
                width = None if f.message_type is not None else _FIXED_WIDTH.get(f.type, 0)
                plan[f.number] = _Costly(path, f.name, kind, width)
        elif f.message_type is not None:
            inner = _plan_of(f.message_type, path + ".", depth + 1)
            if inner:
                plan[f.number] = _Costly(path, f.name, _Kind.MESSAGE, inner=inner)
    return plan


def plan(descriptor: Descriptor) -> Mapping[int, _Costly]:
    """The wire plan of a request message; ValueError when a repeated field in it declares no cost."""
    missing = undeclared(descriptor)
    if missing:
        raise ValueError(f"no (offsetstore.v1.entry_cost) declared for {', '.join(missing)}: see options.proto")
    return _plan_of(descriptor)


# Every request of the service, planned at import: a field without a cost stops the server here.
_PLANS: dict[Descriptor, Mapping[int, _Costly]] = {m.input_type: plan(m.input_type) for m in SERVICE.methods}


def _plan_for(descriptor: Descriptor) -> Mapping[int, _Costly]:
    found = _PLANS.get(descriptor)
    if found is None:  # a message of another pool (a test's)
        found = _PLANS[descriptor] = plan(descriptor)
    return found


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise MalformedError("a truncated or overlong varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _field(data: bytes, i: int, end: int) -> tuple[int, int, int, int]:
    """(field number, wire type, start of its value, end of it) of the field at ``data[i]``, within ``end``."""
    key = data[i]
    if key < 0x80:
        i += 1
    else:
        key, i = _varint(data, i)
    number, kind = key >> 3, key & 7
    at = i
    if kind == 0:
        _, i = _varint(data, i)
    elif kind == 1:
        i += 8
    elif kind == 2:
        length, at = _varint(data, i)
        i = at + length
    elif kind == 5:
        i += 4
    else:  # groups: no message of offsetstore.v1 has one, and no client sends them
        raise MalformedError(f"wire type {kind}")
    if i > end or number == 0:
        raise MalformedError("a field runs past the end of its message")
    return number, kind, at, i


class _TooMany(Exception):
    def __init__(self, path: str) -> None:
        self.path = path


class _Walk:
    """One request's count: each costly field's partitions, and the fields walked against a budget."""

    __slots__ = ("budget", "counts", "current", "limit")

    def __init__(self, limit: int, plan: Mapping[int, _Costly]) -> None:
        self.limit = limit
        self.budget = FIELDS_PER_PARTITION * limit + SLACK_FIELDS
        self.counts: dict[str, int] = {}
        # The costly field being walked (the first, before one is): what a request of too many fields is refused for.
        self.current = "" if not plan else next(iter(plan.values())).path

    def message(self, data: bytes, start: int, end: int, plan: Mapping[int, _Costly], counted: bool) -> int:
        """Walks ``data[start:end]``; the partitions in it. ``counted``: each costly field's count is kept on its own."""
        total = 0
        i = start
        while i < end:
            number, kind, at, i = _field(data, i, end)
            self.budget -= 1
            costly = plan.get(number)
            if costly is None or (kind != 2 and costly.width is None):
                n = 0  # not costly, or not what the field is (the decoder refuses it)
            elif costly.kind is _Kind.MESSAGE:
                self.current = costly.path if counted else self.current
                n = self.message(data, at, i, costly.inner, counted)
            elif costly.kind is _Kind.CONTENTS:
                self.current = costly.path if counted else self.current
                n = max(1, self.message(data, at, i, costly.inner, False))
            elif costly.width is None:
                n, i = self._run(data, i, end, number << 3 | 2)  # an entry, and those right after it
            elif kind != 2:
                n = 1  # one unpacked scalar
            elif costly.width:
                n = (i - at) // costly.width
            else:
                n = len(data[at:i].translate(None, _CONTINUATION))
            if self.budget < 0:
                raise _TooMany(self.current)
            if not n:
                continue
            total += n
            if not counted:
                if total > self.limit:
                    raise _TooMany(self.current)
            elif costly is not None and costly.kind is not _Kind.MESSAGE:
                self.current = costly.path
                self.counts[costly.path] = count = self.counts.get(costly.path, 0) + n
                if count > self.limit:
                    raise _TooMany(costly.path)
        return total

    def _run(self, data: bytes, i: int, end: int, key: int) -> tuple[int, int]:
        """(entries, where they end) of one entry of a list ending at ``i`` and the entries of ``key`` right after it.

        A list is one run of entries: each is skipped by its length in a tight loop, as far as
        the limit (a key of more than one byte is left to the caller's loop).
        """
        n = 1
        if key < 0x80:
            while i + 1 < end and data[i] == key and n <= self.limit:
                length = data[i + 1]
                if length < 0x80:
                    i += 2 + length
                else:
                    length, at = _varint(data, i + 1)
                    i = at + length
                n += 1
            if i > end:
                raise MalformedError("a field runs past the end of its message")
        self.budget -= n - 1
        return n, i


def count_entries(descriptor: Descriptor, data: bytes, limit: int = MAX_PARTITIONS) -> dict[str, int]:
    """The partitions of each costly field of a serialized ``descriptor`` message (``{"topics": 3}``).

    A field past ``limit`` is counted as ``limit + 1`` and the count stops there; so does a
    request of more fields than ``limit`` partitions can hold (charged to the field being
    walked). Raises MalformedError for bytes that are not a message.
    """
    plan = _plan_for(descriptor)
    if not plan:
        return {}
    walk = _Walk(limit, plan)
    try:
        walk.message(data, 0, len(data), plan, True)
    except _TooMany as too_many:
        walk.counts[too_many.path] = limit + 1
    return walk.counts


def check_entries(descriptor: Descriptor, data: bytes, method: str) -> int:
    """The partitions the request carries in its largest costly field (what it is charged at least).

    Raises INVALID_ARGUMENT for a request of more than 10,000 partitions in a field, or for
    bytes that are not a message: the same answer the storage core's check gives a decoded
    request, given before it is decoded.
    """
    try:
        counts = count_entries(descriptor, data)
    except MalformedError:
        raise InvalidArgumentError(f"the request does not decode as a {method} request message") from None
    for path, count in counts.items():
        if count > MAX_PARTITIONS:
            raise InvalidArgumentError.field(path, f"at most {MAX_PARTITIONS} partitions in one request")
    return max(counts.values(), default=0)
