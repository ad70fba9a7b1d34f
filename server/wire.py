"""A request's partitions counted on the wire, so that an oversized one is refused before it is decoded.

Decoding is what costs: a 40 MB CommitOffsets of empty entries is 20 million messages (over
4 GB once decoded and converted), however quickly the 10,000-partition limit refuses it
afterwards. The count walks the serialized request's top-level fields (a length prefix lets
it skip an entry without reading it) and, for topic selections, counts the packed
partitions of each with one C-speed pass over their bytes. It gives up as soon as the count
passes the limit, so what it costs is bounded by the limit, not by the request's size: a
valid request of 10,000 entries is 10,000 steps, a hostile one no more.

What counts is what the storage core's checks count (:mod:`offsetstore.storage.validate`):
the entries of a commit or report; the partitions a selection names, or 1 for a selection
of a whole topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.descriptor import Descriptor

from offsetstore.core.errors import InvalidArgumentError
from offsetstore.storage.validate import MAX_PARTITIONS

__all__ = ["MalformedError", "check_entries", "count_entries"]

#: Top-level fields a request may carry besides its entries (its group id, generation, ...):
#: well above what any message of the service has, so that only repeats reach the limit.
SLACK_FIELDS = 64

# The varint ends at a byte below 0x80: deleting the others leaves one byte per varint.
_CONTINUATION = bytes(range(0x80, 0x100))


class MalformedError(ValueError):
    """The bytes are not a protobuf message (a truncated field, a bad wire type)."""


@dataclass(frozen=True)
class _Counted:
    field: str  # the request's repeated field of entries
    number: int
    inner: int | None  # a repeated scalar inside each entry whose values count instead (partitions)


_PLANS: dict[str, _Counted | None] = {}


def _plan(descriptor: Descriptor) -> _Counted | None:
    """The field of ``descriptor`` whose entries count, read from the message's descriptor once."""
    if descriptor.full_name not in _PLANS:
        found = None
        for f in descriptor.fields:
            if f.is_repeated and f.message_type is not None:
                inner = next(
                    (g.number for g in f.message_type.fields if g.is_repeated and g.message_type is None), None
                )
                found = _Counted(f.name, f.number, inner)
                break
        _PLANS[descriptor.full_name] = found
    return _PLANS[descriptor.full_name]


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


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end of its value) of each field in ``data[start:end]``."""
    i = start
    while i < end:
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
        yield number, kind, at, i


def count_entries(descriptor: Descriptor, data: bytes, limit: int = MAX_PARTITIONS) -> tuple[str, int] | None:
    """(the counted field, its count) of a serialized ``descriptor`` message; the count stops just past ``limit``.

    None for a message without entries. Raises MalformedError for bytes that are not a message.
    Fields are counted too, at every level: past what a request of ``limit`` partitions can
    hold, repeats of other fields (no cheaper to decode) count as too many partitions.
    """
    plan = _plan(descriptor)
    if plan is None:
        return None
    count = 0
    budget = [2 * limit + SLACK_FIELDS]  # fields left to walk: a selection's topic and each partition
    for number, kind, start, end in _fields(data, 0, len(data)):
        budget[0] -= 1
        if number == plan.number and kind == 2:
            count += 1 if plan.inner is None else max(_inner_count(data, start, end, plan.inner, limit, budget), 1)
        if count > limit or budget[0] < 0:
            return plan.field, max(count, limit + 1)
    return plan.field, count


def _inner_count(data: bytes, start: int, end: int, number: int, limit: int, budget: list[int]) -> int:
    """The values of the repeated scalar field ``number`` in one entry, packed or not; spends ``budget``."""
    count = 0
    for n, kind, at, stop in _fields(data, start, end):
        budget[0] -= 1
        if n == number:
            count += len(data[at:stop].translate(None, _CONTINUATION)) if kind == 2 else 1
        if count > limit or budget[0] < 0:
            return limit + 1
    return count


def check_entries(descriptor: Descriptor, data: bytes, method: str) -> None:
    """Raises INVALID_ARGUMENT for a request of more than 10,000 partitions, or for bytes that are not a message.

    The same answer the storage core's check gives a decoded request, given before it is decoded.
    """
    try:
        found = count_entries(descriptor, data)
    except MalformedError:
        raise InvalidArgumentError(f"the request does not decode as a {method} request message") from None
    if found is not None and found[1] > MAX_PARTITIONS:
        raise InvalidArgumentError.field(found[0], f"at most {MAX_PARTITIONS} partitions in one request")
