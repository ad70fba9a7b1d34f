"""Round trips between the client's plain values and the v1 messages, and of errors through a status."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from offsetstore.client import _base
from offsetstore.core import convert, convert_requests
from offsetstore.core.errors import (
    DeadlineExceededError,
    FieldViolation,
    GroupNotFoundError,
    InternalError,
    InvalidArgumentError,
    OffsetMismatchError,
    OffsetStoreError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StaleGenerationError,
    StoreUnavailableError,
    UnauthenticatedError,
    from_rpc_error,
)
from offsetstore.core.types import (
    Boundary,
    ChangeKind,
    CommittedOffset,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    PartitionStatus,
    ResetResult,
    TopicPartition,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2 as pb

WHEN = datetime(2024, 5, 17, 13, 45, 12, 345678, tzinfo=UTC)


def over_the_wire(message: Message) -> Message:
    # Serialising catches what only survives in memory (field presence above all).
    return type(message).FromString(message.SerializeToString())


# Timestamps


def test_timestamp_keeps_microseconds_and_utc() -> None:
    ts = convert.datetime_to_timestamp(WHEN)
    assert (ts.seconds, ts.nanos) == (int(WHEN.timestamp()), 345678000)
    back = convert.timestamp_to_datetime(over_the_wire(ts))
    assert back == WHEN
    assert back.utcoffset() == timedelta(0)
    assert back.microsecond == 345678


def test_timestamp_of_another_zone_is_the_same_instant_in_utc() -> None:
    paris = WHEN.astimezone(timezone(timedelta(hours=2)))
    back = convert.timestamp_to_datetime(convert.datetime_to_timestamp(paris))
    assert back == WHEN
    assert back.tzinfo == UTC
    assert back.hour == 13


def test_naive_datetime_is_taken_as_utc() -> None:
    naive = WHEN.replace(tzinfo=None)
    assert convert.timestamp_to_datetime(convert.datetime_to_timestamp(naive)) == WHEN


# Messages

ROUND_TRIPS: list[tuple[Callable[[Any], Message], Callable[[Any], Any], Any]] = [
    (convert.topic_partition_to_proto, convert.topic_partition_from_proto, TopicPartition("orders", 7)),
    (
        convert.offset_commit_to_proto,
        convert.offset_commit_from_proto,
        OffsetCommit("orders", 3, 1234567890123, "meta", expected_offset=1000),
    ),
    (convert.offset_commit_to_proto, convert.offset_commit_from_proto, OffsetCommit("orders", 0, 5)),
    (
        convert.committed_offset_to_proto,
        convert.committed_offset_from_proto,
        CommittedOffset("orders", 2, 42, "m", WHEN),
    ),
    (
        convert.committed_offset_to_proto,
        convert.committed_offset_from_proto,
        CommittedOffset("orders", 2, -1, "", None),
    ),
    (
        convert.offset_change_to_proto,
        convert.offset_change_from_proto,
        OffsetChange("orders", 1, -1, 10, ChangeKind.COMMIT, 3, WHEN, "alice"),
    ),
    (
        convert.offset_change_to_proto,
        convert.offset_change_from_proto,
        OffsetChange("orders", 1, 10, -1, ChangeKind.DELETE, 0, None, ""),
    ),
    (convert.watermark_to_proto, convert.watermark_from_proto, Watermark("orders", 4, 100, 2**40)),
    (
        convert.group_summary_to_proto,
        convert.group_summary_from_proto,
        GroupSummary("etl", 9, 12, WHEN, 77),
    ),
    (
        convert.group_summary_to_proto,
        convert.group_summary_from_proto,
        GroupSummary("etl", 0, 0, None, -1),
    ),
    (
        convert.partition_status_to_proto,
        convert.partition_status_from_proto,
        PartitionStatus("orders", 5, 90, "m", WHEN, 100, 10),
    ),
    (
        convert.partition_status_to_proto,
        convert.partition_status_from_proto,
        PartitionStatus("orders", 5, -2, "", None, -1, -1),
    ),
]


@pytest.mark.parametrize(("to_proto", "from_proto", "value"), ROUND_TRIPS)
def test_value_survives_the_wire(
    to_proto: Callable[[Any], Message], from_proto: Callable[[Any], Any], value: Any
) -> None:
    back = from_proto(over_the_wire(to_proto(value)))
    assert back == value
    assert type(back) is type(value)


def test_message_fields_carry_the_values() -> None:
    message = convert.offset_change_to_proto(OffsetChange("t", 1, 4, 9, ChangeKind.RESET, 6, WHEN, "ops"))
    assert (message.topic, message.partition, message.previous_offset, message.new_offset) == ("t", 1, 4, 9)
    assert message.kind == pb.CHANGE_KIND_RESET
    assert (message.generation, message.actor) == (6, "ops")
    assert message.change_time.seconds == int(WHEN.timestamp())


def test_times_come_back_aware_utc() -> None:
    back = convert.committed_offset_from_proto(
        over_the_wire(convert.committed_offset_to_proto(CommittedOffset("t", 0, 1, "", WHEN)))
    )
    assert back.commit_time is not None
    assert back.commit_time.tzinfo == UTC
    assert back.commit_time.microsecond == 345678


@pytest.mark.parametrize(
    ("to_proto", "value", "field"),
    [
        (convert.committed_offset_to_proto, CommittedOffset("t", 0, 1), "commit_time"),
        (convert.offset_change_to_proto, OffsetChange("t", 0, 1, 2, ChangeKind.COMMIT, 0), "change_time"),
        (convert.group_summary_to_proto, GroupSummary("g", 0, 0, None, -1), "last_commit_time"),
        (convert.partition_status_to_proto, PartitionStatus("t", 0, 1, "", None, -1, -1), "commit_time"),
    ],
)
def test_no_time_is_an_unset_timestamp(to_proto: Callable[[Any], Message], value: Any, field: str) -> None:
    message = to_proto(value)
    assert not message.HasField(field)


def test_unset_timestamp_is_none_not_the_epoch() -> None:
    assert convert.committed_offset_from_proto(pb.CommittedOffset(topic="t")).commit_time is None
    epoch = pb.CommittedOffset(topic="t")
    epoch.commit_time.SetInParent()
    assert convert.committed_offset_from_proto(epoch).commit_time == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("expected", [None, 0, -1, 17])
def test_expected_offset_presence_is_kept(expected: int | None) -> None:
    message = over_the_wire(convert.offset_commit_to_proto(OffsetCommit("t", 0, 5, expected_offset=expected)))
    assert message.HasField("expected_offset") == (expected is not None)
    assert convert.offset_commit_from_proto(message).expected_offset == expected


def test_expected_offset_none_zero_and_minus_one_are_distinct() -> None:
    values = {
        convert.offset_commit_from_proto(
            over_the_wire(convert.offset_commit_to_proto(OffsetCommit("t", 0, 5, expected_offset=e)))
        ).expected_offset
        for e in (None, 0, -1)
    }
    assert len(values) == 3


# Enums


@pytest.mark.parametrize(
    ("kind", "number"),
    [
        (ChangeKind.COMMIT, pb.CHANGE_KIND_COMMIT),
        (ChangeKind.RESET, pb.CHANGE_KIND_RESET),
        (ChangeKind.DELETE, pb.CHANGE_KIND_DELETE),
    ],
)
def test_change_kind(kind: ChangeKind, number: int) -> None:
    assert convert.change_kind_to_proto(kind) == number
    assert convert.change_kind_from_proto(number) is kind


@pytest.mark.parametrize(
    ("boundary", "number"),
    [(Boundary.EARLIEST, pb.BOUNDARY_EARLIEST), (Boundary.LATEST, pb.BOUNDARY_LATEST)],
)
def test_boundary(boundary: Boundary, number: int) -> None:
    assert convert.boundary_to_proto(boundary) == number
    assert convert.boundary_from_proto(number) is boundary


def test_unspecified_enums_are_refused() -> None:
    with pytest.raises(ValueError):
        convert.boundary_from_proto(pb.BOUNDARY_UNSPECIFIED)
    with pytest.raises(ValueError):
        convert.change_kind_from_proto(pb.CHANGE_KIND_UNSPECIFIED)
    with pytest.raises(ValueError):
        convert.change_kind_from_proto(99)


# Responses


def test_fetch_result_round_trip() -> None:
    value = FetchResult(
        offsets={
            TopicPartition("a", 0): CommittedOffset("a", 0, 10, "x", WHEN),
            TopicPartition("a", 1): CommittedOffset("a", 1, -1, "", None),
            TopicPartition("b", 0): CommittedOffset("b", 0, 3, "", WHEN),
        },
        generation=4,
    )
    back = convert.fetch_result_from_proto(over_the_wire(convert.fetch_result_to_proto(value)))
    assert back == value
    assert list(back.offsets) == [("a", 0), ("a", 1), ("b", 0)]
    assert back.offsets[("a", 0)].offset == 10


def test_reset_result_round_trip() -> None:
    value = ResetResult(
        changes=[
            OffsetChange("a", 0, 10, 0, ChangeKind.RESET, 5, WHEN, "ops"),
            OffsetChange("a", 1, -1, -2, ChangeKind.RESET, 5, WHEN, "ops"),
        ],
        generation=5,
        dry_run=True,
    )
    assert convert.reset_result_from_proto(over_the_wire(convert.reset_result_to_proto(value))) == value


def test_group_description_round_trip() -> None:
    value = GroupDescription(
        "etl",
        3,
        [PartitionStatus("a", 0, 90, "", WHEN, 100, 10), PartitionStatus("a", 1, 5, "m", None, -1, -1)],
    )
    assert convert.group_description_from_proto(over_the_wire(convert.group_description_to_proto(value))) == value


# Topic selections


def selections(messages: list[pb.TopicSelection]) -> list[tuple[str, list[int]]]:
    return [(m.topic, list(m.partitions)) for m in messages]


def test_no_topics_selects_everything() -> None:
    assert convert_requests.selections_to_proto(None) == []
    assert convert_requests.selections_from_proto([]) == []


def test_mapping_selection() -> None:
    messages = convert_requests.selections_to_proto({"a": [2, 0], "b": (), "c": range(2)})
    assert selections(messages) == [("a", [2, 0]), ("b", []), ("c", [0, 1])]
    assert convert_requests.selections_from_proto(messages) == [("a", (2, 0)), ("b", ()), ("c", (0, 1))]


def test_topic_names_select_whole_topics() -> None:
    assert selections(convert_requests.selections_to_proto(["b", "a"])) == [("b", []), ("a", [])]
    assert selections(convert_requests.selections_to_proto("orders")) == [("orders", [])]


def test_partition_pairs_gather_by_topic() -> None:
    messages = convert_requests.selections_to_proto([("a", 1), TopicPartition("b", 0), ("a", 0)])
    assert selections(messages) == [("a", [1, 0]), ("b", [0])]


def test_selection_round_trip_keeps_order() -> None:
    topics = {"z": (3, 1), "a": (), "m": (0,)}
    back = convert_requests.selections_from_proto(convert_requests.selections_to_proto(topics))
    assert back == list(topics.items())


def test_repeated_topic_stays_repeated() -> None:
    messages = [
        pb.TopicSelection(topic="a", partitions=[0, 1]),
        pb.TopicSelection(topic="b"),
        pb.TopicSelection(topic="a", partitions=[1, 2]),
    ]
    assert convert_requests.selections_from_proto(messages) == [("a", (0, 1)), ("b", ()), ("a", (1, 2))]


# Requests built by the clients


def test_commit_mapping_means_plain_commits() -> None:
    request = _base.commit_offsets_request("g", {("a", 0): 10, TopicPartition("a", 1): 20}, 3)
    assert request.generation == 3
    assert [(o.topic, o.partition, o.offset, o.HasField("expected_offset")) for o in request.offsets] == [
        ("a", 0, 10, False),
        ("a", 1, 20, False),
    ]


def test_reset_with_two_targets_fails_before_any_call() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        _base.reset_offsets_request(
            "g",
            topics=None,
            all_topics=True,
            to_offset=0,
            shift_by=-1,
            to_boundary=None,
            to_commit_time=None,
            dry_run=False,
        )
    assert info.value.violations == [FieldViolation("target", "give exactly one target")]


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"to_offset": 0}, "to_offset"),
        ({"shift_by": -5}, "shift_by"),
        ({"to_boundary": Boundary.LATEST}, "to_boundary"),
        ({"to_commit_time": WHEN}, "to_commit_time"),
        ({}, None),
    ],
)
def test_reset_sends_the_target_given(target: dict[str, Any], field: str | None) -> None:
    kwargs: dict[str, Any] = {"to_offset": None, "shift_by": None, "to_boundary": None, "to_commit_time": None}
    kwargs.update(target)
    request = over_the_wire(
        _base.reset_offsets_request("g", topics={"a": [0]}, all_topics=False, dry_run=True, **kwargs)
    )
    assert request.WhichOneof("target") == field
    assert request.dry_run is True
    if field == "to_offset":
        assert request.to_offset == 0
    elif field == "to_boundary":
        assert request.to_boundary == pb.BOUNDARY_LATEST
    elif field == "to_commit_time":
        assert convert.timestamp_to_datetime(request.to_commit_time) == WHEN


def test_history_bounds_unset_when_not_given() -> None:
    request = _base.list_offset_history_request("g", topics=None, since=WHEN, until=None, page_size=10, page_token="t")
    assert request.HasField("since") and not request.HasField("until")
    assert convert.timestamp_to_datetime(request.since) == WHEN


# Errors through a gRPC status


class FakeCall(grpc.RpcError):
    """What a failed call looks like to the client (a grpc.Call that is an RpcError)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        self._code, self._details, self._trailing = code, details, trailing_metadata

    @classmethod
    def of(cls, error: OffsetStoreError) -> FakeCall:
        # The status exactly as the server's servicer would abort with it.
        status = error.to_status()
        return cls(status.code, status.details, status.trailing_metadata)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


ERRORS: list[OffsetStoreError] = [
    InvalidArgumentError(
        "offsets[1].partition: must be >= 0",
        violations=[FieldViolation("offsets[1].partition", "must be >= 0"), FieldViolation("group_id", "empty")],
    ),
    StaleGenerationError("generation 3 is stale", metadata={"current_generation": "5"}),
    OffsetMismatchError("stored offset differs", metadata={"stored_offset": "-1"}),
    GroupNotFoundError("no group etl"),
    StoreUnavailableError("database unavailable"),
    UnauthenticatedError("no token"),
    PermissionDeniedError("not allowed"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_error_round_trip(error: OffsetStoreError) -> None:
    assert error.to_status().code == error.code
    back = from_rpc_error(FakeCall.of(error))
    assert type(back) is type(error)
    assert back.message == error.message
    assert back.metadata == error.metadata


def test_error_round_trip_keeps_details() -> None:
    stale = from_rpc_error(FakeCall.of(ERRORS[1]))
    assert isinstance(stale, StaleGenerationError)
    assert stale.current_generation == 5
    mismatch = from_rpc_error(FakeCall.of(ERRORS[2]))
    assert isinstance(mismatch, OffsetMismatchError)
    assert mismatch.stored_offset == -1
    invalid = from_rpc_error(FakeCall.of(ERRORS[0]))
    assert isinstance(invalid, InvalidArgumentError)
    assert invalid.violations == [
        FieldViolation("offsets[1].partition", "must be >= 0"),
        FieldViolation("group_id", "empty"),
    ]


@pytest.mark.parametrize(
    ("seconds", "ms"),
    [(0.25, 250), (1.1, 1100), (0.0011, 2), (0.001, 1), (0.0002, 1), (1e-12, 1), (0, 0)],
)
def test_a_retry_delay_travels_in_whole_milliseconds_rounded_up_never_to_zero(seconds: float, ms: int) -> None:
    # Rounded to the nearest, a delay under half a millisecond told the caller to retry at once.
    error = ResourceExhaustedError("slow down", retry_after=seconds)
    back = from_rpc_error(FakeCall.of(error))
    assert isinstance(back, ResourceExhaustedError)
    assert back.metadata["retry_after_ms"] == error.metadata["retry_after_ms"] == str(ms)
    assert back.retry_after == error.retry_after == ms / 1000  # the same delay on either side


def test_status_without_details_maps_by_code() -> None:
    error = from_rpc_error(FakeCall(grpc.StatusCode.UNAVAILABLE, "connect failed"))
    assert type(error) is StoreUnavailableError
    assert error.message == "connect failed"


def test_unknown_status_is_internal_and_keeps_the_code() -> None:
    error = from_rpc_error(FakeCall(grpc.StatusCode.UNIMPLEMENTED, "no such method", None))
    assert type(error) is InternalError
    assert error.status_code == grpc.StatusCode.UNIMPLEMENTED


def test_deadline_exceeded_is_its_own_error() -> None:
    error = from_rpc_error(FakeCall(grpc.StatusCode.DEADLINE_EXCEEDED, "late", None))
    assert type(error) is DeadlineExceededError


@pytest.mark.parametrize(
    "value",
    [
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 11, 24, 13, 48, 11, 123456),  # naive: taken as UTC
        datetime(2026, 11, 24, 13, 48, 11, 654321, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
    ],
)
def test_timestamps_are_exactly_protobufs_own(value: datetime) -> None:
    expected = pb.CommittedOffset().commit_time
    expected.FromDatetime(value)
    assert convert.datetime_to_timestamp(value) == expected
    message = pb.CommittedOffset()
    convert._set_time(message, "commit_time", value)
    assert message.HasField("commit_time") and message.commit_time == expected
