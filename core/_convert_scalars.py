"""Conversions of the contract's scalars: timestamps and enums (the messages built of them: :mod:`.convert`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from offsetstore.core.types import Boundary, ChangeKind
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = [
    "boundary_from_proto",
    "boundary_to_proto",
    "change_kind_from_proto",
    "change_kind_to_proto",
    "datetime_to_timestamp",
    "epoch_parts",
    "get_time",
    "set_time",
    "timestamp_to_datetime",
]

# Timestamps


def datetime_to_timestamp(value: datetime) -> Timestamp:
    """A Timestamp for `value`; a naive datetime is taken as UTC."""
    seconds, nanos = epoch_parts(value)
    return Timestamp(seconds=seconds, nanos=nanos)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_parts(value: datetime) -> tuple[int, int]:
    # Integer arithmetic on the timedelta: exact, and several times cheaper than
    # Timestamp.FromDatetime, which a fetch of many partitions pays for each one.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    seconds, micros = divmod((value - _EPOCH) // _MICROSECOND, 1_000_000)
    return seconds, micros * 1000


def timestamp_to_datetime(ts: Timestamp) -> datetime:
    """The timezone-aware UTC datetime of `ts`."""
    return ts.ToDatetime(tzinfo=UTC)


def set_time(message: Any, name: str, value: datetime | None) -> None:
    # None leaves the field unset, which is how "no time" travels.
    if value is not None:
        ts = getattr(message, name)
        ts.SetInParent()  # present even at the epoch itself, whose fields are all zero
        ts.seconds, ts.nanos = epoch_parts(value)


def get_time(message: Any, name: str) -> datetime | None:
    return timestamp_to_datetime(getattr(message, name)) if message.HasField(name) else None


# Enums. Mapped by name so a renumbering on either side cannot go unnoticed.

_BOUNDARY_TO_PROTO = {Boundary.EARLIEST: pb.BOUNDARY_EARLIEST, Boundary.LATEST: pb.BOUNDARY_LATEST}
_BOUNDARY_FROM_PROTO: dict[int, Boundary] = {v: k for k, v in _BOUNDARY_TO_PROTO.items()}
_KIND_TO_PROTO = {
    ChangeKind.COMMIT: pb.CHANGE_KIND_COMMIT,
    ChangeKind.RESET: pb.CHANGE_KIND_RESET,
    ChangeKind.DELETE: pb.CHANGE_KIND_DELETE,
    ChangeKind.EXPIRE: pb.CHANGE_KIND_EXPIRE,
    ChangeKind.ADOPT: pb.CHANGE_KIND_ADOPT,
    ChangeKind.OBSERVED: pb.CHANGE_KIND_OBSERVED,
    ChangeKind.SWITCH: pb.CHANGE_KIND_SWITCH,
}
_KIND_FROM_PROTO: dict[int, ChangeKind] = {v: k for k, v in _KIND_TO_PROTO.items()}


def boundary_to_proto(value: Boundary | int) -> pb.Boundary:
    return _BOUNDARY_TO_PROTO[Boundary(value)]


def boundary_from_proto(value: int) -> Boundary:
    """The Boundary of a proto value; ValueError for BOUNDARY_UNSPECIFIED or an unknown value."""
    try:
        return _BOUNDARY_FROM_PROTO[value]
    except KeyError:
        raise ValueError(f"not a boundary: {value}") from None


def change_kind_to_proto(value: ChangeKind | int) -> pb.ChangeKind:
    return _KIND_TO_PROTO[ChangeKind(value)]


def change_kind_from_proto(value: int) -> ChangeKind:
    """The ChangeKind of a proto value; ValueError for CHANGE_KIND_UNSPECIFIED or an unknown value."""
    try:
        return _KIND_FROM_PROTO[value]
    except KeyError:
        raise ValueError(f"not a change kind: {value}") from None
