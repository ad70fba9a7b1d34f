"""Bad input: every row of the contract's error table is INVALID_ARGUMENT naming the field, and writes nothing.

Also the other side of the coin: strings that look like SQL or format strings are plain data,
and no error message carries database text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from offsetstore.client import (
    GroupNotFoundError,
    InvalidArgumentError,
    OffsetCommit,
    TopicPartition,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc

INT64_MAX = 2**63 - 1
MAX_PARTITIONS = 10_000
# What would betray database text in a message: driver names, tracebacks (any case), SQL (upper case).
DRIVER_WORDS = ("psycopg", "sqlalchemy", "traceback", "sqlstate")
SQL_WORDS = ("SELECT", "INSERT", "UPDATE", "DELETE FROM", "ON CONFLICT", "[SQL:")

# --- fixtures and helpers ---


@pytest.fixture(scope="module")
def stub(server) -> Iterator[pb_grpc.OffsetStoreServiceStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.OffsetStoreServiceStub(channel)


def padded(prefix: str, size: int, filler: str = "x") -> str:
    """``prefix`` followed by ``filler`` up to exactly ``size`` UTF-8 bytes (an "x" evens out odd gaps)."""
    gap = size - len(prefix.encode())
    width = len(filler.encode())
    return prefix + "x" * (gap % width) + filler * (gap // width)


def token_of(value: object) -> str:
    """A page token as the server encodes them, holding ``value``."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def commit(group_id: str, *offsets: pb.OffsetCommit, generation: int = 0) -> pb.CommitOffsetsRequest:
    return pb.CommitOffsetsRequest(group_id=group_id, offsets=offsets, generation=generation)


def oc(topic: str, partition: int = 0, offset: int = 1, **fields: Any) -> pb.OffsetCommit:
    return pb.OffsetCommit(topic=topic, partition=partition, offset=offset, **fields)


def sel(topic: str, *partitions: int) -> pb.TopicSelection:
    return pb.TopicSelection(topic=topic, partitions=partitions)


def wm(topic: str, partition: int = 0, start: int = 0, end: int = 10) -> pb.Watermark:
    return pb.Watermark(topic=topic, partition=partition, log_start_offset=start, log_end_offset=end)


def reset(group_id: str, *topics: pb.TopicSelection, **fields: Any) -> pb.ResetOffsetsRequest:
    return pb.ResetOffsetsRequest(group_id=group_id, topics=topics, **fields)


def failure(call: Callable[[], Any]) -> tuple[grpc.RpcError, error_details_pb2.ErrorInfo | None, list[str]]:
    """The error of a call that must fail, its ErrorInfo and the fields its BadRequest names."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    status = rpc_status.from_call(caught.value)
    info, fields = None, []
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
    return caught.value, info, fields


def assert_invalid_argument(call: Callable[[], Any], field: str) -> None:
    error, info, fields = failure(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert info is not None
    assert (info.domain, info.reason) == ("offsetstore.v1", "INVALID_ARGUMENT")
    assert fields == [field]
    assert_clean_message(error.details())


def assert_clean_message(message: str) -> None:
    for word in DRIVER_WORDS:
        assert word not in message.lower(), message
    for word in SQL_WORDS:
        assert word not in message, message


def assert_nothing_written(engine: sa.Engine, client, group_id: str, topic: str) -> None:
    """No group, offset, history entry or watermark of this test exists."""
    with engine.connect() as conn:
        counts = conn.execute(
            sa.text(
                "SELECT"
                " (SELECT count(*) FROM offsetstore.groups WHERE starts_with(group_id, :g) OR group_id = ''),"
                " (SELECT count(*) FROM offsetstore.offsets WHERE starts_with(group_id, :g) OR starts_with(topic, :t)),"
                " (SELECT count(*) FROM offsetstore.offset_history WHERE starts_with(group_id, :g) OR starts_with(topic, :t)),"
                " (SELECT count(*) FROM offsetstore.watermarks WHERE starts_with(topic, :t))"
            ),
            {"g": group_id, "t": topic},
        ).one()
    assert tuple(counts) == (0, 0, 0, 0)
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)
    fetched = client.fetch_offsets(group_id)
    assert (fetched.offsets, fetched.generation) == ({}, 0)
    assert client.list_offset_history(group_id).items == []


# --- the error table ---
#
# Each case: the RPC, the request built from the test's fresh group id and topic, and the
# field its BadRequest must name. Where a request has several offsets, the bad one comes
# after a good one, so that "nothing written" also covers the good one.

CASES = [
    # CommitOffsets
    pytest.param("CommitOffsets", lambda g, t: commit("", oc(t)), "group_id", id="commit-empty-group-id"),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(padded(g, 256), oc(t)), "group_id", id="commit-group-id-256-bytes"
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(padded(g, 256, "é"), oc(t)),
        "group_id",
        id="commit-group-id-256-bytes-multibyte",
    ),
    pytest.param("CommitOffsets", lambda g, t: commit("é" * 128, oc(t)), "group_id", id="commit-group-id-128-e-acute"),
    pytest.param("CommitOffsets", lambda g, t: commit(g + "\x00", oc(t)), "group_id", id="commit-group-id-nul"),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc("", 1)), "offsets[1].topic", id="commit-topic-empty"
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t.ljust(250, "x"), 1)),
        "offsets[1].topic",
        id="commit-topic-250-chars",
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc(t + " x", 1)), "offsets[1].topic", id="commit-topic-space"
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc(t + "/x", 1)), "offsets[1].topic", id="commit-topic-slash"
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc(t + "ü", 1)), "offsets[1].topic", id="commit-topic-umlaut"
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc(t + "'", 1)), "offsets[1].topic", id="commit-topic-quote"
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t + '"', 1)),
        "offsets[1].topic",
        id="commit-topic-double-quote",
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc(t + "\n", 1)), "offsets[1].topic", id="commit-topic-newline"
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t, -1)),
        "offsets[1].partition",
        id="commit-partition-negative",
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), oc(t, 1, -1)), "offsets[1].offset", id="commit-offset-negative"
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t, 1, metadata="m" * 4097)),
        "offsets[1].metadata",
        id="commit-metadata-4097-bytes",
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t, 1, metadata="é" * 2049)),
        "offsets[1].metadata",
        id="commit-metadata-4098-bytes-multibyte",
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t, 1, metadata="a\x00b")),
        "offsets[1].metadata",
        id="commit-metadata-nul",
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t, 0, 1), oc(t, 0, 2)),
        "offsets[1].partition",
        id="commit-same-partition-twice",
    ),
    pytest.param(
        "CommitOffsets", lambda g, t: commit(g, oc(t), generation=-1), "generation", id="commit-negative-generation"
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, oc(t), oc(t, 1, expected_offset=-2)),
        "offsets[1].expected_offset",
        id="commit-expected-offset-minus-2",
    ),
    pytest.param(
        "CommitOffsets",
        lambda g, t: commit(g, *(oc(t, p) for p in range(MAX_PARTITIONS + 1))),
        "offsets",
        id="commit-10001-partitions",
    ),
    # FetchOffsets
    pytest.param(
        "FetchOffsets", lambda g, t: pb.FetchOffsetsRequest(group_id=""), "group_id", id="fetch-empty-group-id"
    ),
    pytest.param(
        "FetchOffsets", lambda g, t: pb.FetchOffsetsRequest(group_id=g + "\x00"), "group_id", id="fetch-group-id-nul"
    ),
    pytest.param(
        "FetchOffsets",
        lambda g, t: pb.FetchOffsetsRequest(group_id=g, topics=[sel(t, 0, 0)]),
        "topics[0].partitions[1]",
        id="fetch-same-partition-twice",
    ),
    pytest.param(
        "FetchOffsets",
        lambda g, t: pb.FetchOffsetsRequest(group_id=g, topics=[sel(t), sel(t, 0)]),
        "topics[1].partitions[0]",
        id="fetch-topic-and-its-partition",
    ),
    pytest.param(
        "FetchOffsets",
        lambda g, t: pb.FetchOffsetsRequest(group_id=g, topics=[sel(t), sel(t)]),
        "topics[1].topic",
        id="fetch-same-topic-twice",
    ),
    pytest.param(
        "FetchOffsets",
        lambda g, t: pb.FetchOffsetsRequest(group_id=g, topics=[sel(t + "/")]),
        "topics[0].topic",
        id="fetch-bad-topic",
    ),
    pytest.param(
        "FetchOffsets",
        lambda g, t: pb.FetchOffsetsRequest(group_id=g, topics=[sel(t, -1)]),
        "topics[0].partitions[0]",
        id="fetch-negative-partition",
    ),
    pytest.param(
        "FetchOffsets",
        lambda g, t: pb.FetchOffsetsRequest(group_id=g, topics=[sel(t, *range(MAX_PARTITIONS + 1))]),
        "topics",
        id="fetch-10001-partitions",
    ),
    # ResetOffsets
    pytest.param(
        "ResetOffsets", lambda g, t: reset("", all_topics=True, to_offset=0), "group_id", id="reset-empty-group-id"
    ),
    pytest.param("ResetOffsets", lambda g, t: reset(g, to_offset=0), "topics", id="reset-no-selection"),
    pytest.param(
        "ResetOffsets",
        lambda g, t: reset(g, sel(t, 0), all_topics=True, to_offset=0),
        "all_topics",
        id="reset-topics-and-all-topics",
    ),
    pytest.param("ResetOffsets", lambda g, t: reset(g, sel(t, 0)), "target", id="reset-no-target"),
    pytest.param(
        "ResetOffsets",
        lambda g, t: reset(g, sel(t, 0), to_boundary=pb.BOUNDARY_UNSPECIFIED),
        "to_boundary",
        id="reset-boundary-unspecified",
    ),
    pytest.param(
        "ResetOffsets", lambda g, t: reset(g, sel(t, 0), to_boundary=7), "to_boundary", id="reset-boundary-unknown"
    ),
    pytest.param(
        "ResetOffsets", lambda g, t: reset(g, sel(t, 0), to_offset=-1), "to_offset", id="reset-negative-to-offset"
    ),
    pytest.param(
        "ResetOffsets",
        lambda g, t: reset(g, sel(t, 0, 1, 0), to_offset=0),
        "topics[0].partitions[2]",
        id="reset-same-partition-twice",
    ),
    pytest.param(
        "ResetOffsets",
        lambda g, t: reset(g, sel(t, 0), sel(t + " "), to_offset=0),
        "topics[1].topic",
        id="reset-bad-topic",
    ),
    pytest.param(
        "ResetOffsets",
        lambda g, t: reset(g, sel(t, *range(MAX_PARTITIONS + 1)), to_offset=0),
        "topics",
        id="reset-10001-partitions",
    ),
    pytest.param(
        "ResetOffsets",
        lambda g, t: reset(g, sel(t, 0), to_commit_time=Timestamp(seconds=10**15)),
        "to_commit_time",
        id="reset-commit-time-out-of-range",
    ),
    # DeleteOffsets
    pytest.param(
        "DeleteOffsets",
        lambda g, t: pb.DeleteOffsetsRequest(group_id="", all_topics=True),
        "group_id",
        id="delete-empty-group-id",
    ),
    pytest.param("DeleteOffsets", lambda g, t: pb.DeleteOffsetsRequest(group_id=g), "topics", id="delete-no-selection"),
    pytest.param(
        "DeleteOffsets",
        lambda g, t: pb.DeleteOffsetsRequest(group_id=g, topics=[sel(t)], all_topics=True),
        "all_topics",
        id="delete-topics-and-all-topics",
    ),
    pytest.param(
        "DeleteOffsets",
        lambda g, t: pb.DeleteOffsetsRequest(group_id=g, topics=[sel(t, 3, 3)]),
        "topics[0].partitions[1]",
        id="delete-same-partition-twice",
    ),
    # JoinGroup
    pytest.param("JoinGroup", lambda g, t: pb.JoinGroupRequest(group_id=""), "group_id", id="join-empty-group-id"),
    pytest.param(
        "JoinGroup", lambda g, t: pb.JoinGroupRequest(group_id=padded(g, 256)), "group_id", id="join-group-id-256-bytes"
    ),
    pytest.param(
        "JoinGroup", lambda g, t: pb.JoinGroupRequest(group_id=g + "\x00"), "group_id", id="join-group-id-nul"
    ),
    pytest.param(
        "JoinGroup",
        lambda g, t: pb.JoinGroupRequest(group_id=g, member_id="m\x00"),
        "member_id",
        id="join-member-id-nul",
    ),
    pytest.param(
        "JoinGroup",
        lambda g, t: pb.JoinGroupRequest(group_id=g, member_id="m" * 256),
        "member_id",
        id="join-member-id-256-bytes",
    ),
    # ListGroups
    pytest.param(
        "ListGroups",
        lambda g, t: pb.ListGroupsRequest(prefix=g, page_size=-1),
        "page_size",
        id="list-groups-negative-page-size",
    ),
    pytest.param(
        "ListGroups",
        lambda g, t: pb.ListGroupsRequest(prefix=g, page_token="garbage"),
        "page_token",
        id="list-groups-garbage-token",
    ),
    pytest.param(
        "ListGroups",
        lambda g, t: pb.ListGroupsRequest(prefix=g, page_token=token_of(5)),
        "page_token",
        id="list-groups-number-token",
    ),
    pytest.param(
        "ListGroups", lambda g, t: pb.ListGroupsRequest(prefix=g + "\x00"), "prefix", id="list-groups-prefix-nul"
    ),
    # DescribeGroup
    pytest.param(
        "DescribeGroup", lambda g, t: pb.DescribeGroupRequest(group_id=""), "group_id", id="describe-empty-group-id"
    ),
    pytest.param(
        "DescribeGroup",
        lambda g, t: pb.DescribeGroupRequest(group_id=padded(g, 256, "é")),
        "group_id",
        id="describe-group-id-256-bytes",
    ),
    # ListOffsetHistory
    pytest.param(
        "ListOffsetHistory",
        lambda g, t: pb.ListOffsetHistoryRequest(group_id=""),
        "group_id",
        id="history-empty-group-id",
    ),
    pytest.param(
        "ListOffsetHistory",
        lambda g, t: pb.ListOffsetHistoryRequest(group_id=g, page_size=-5),
        "page_size",
        id="history-negative-page-size",
    ),
    pytest.param(
        "ListOffsetHistory",
        lambda g, t: pb.ListOffsetHistoryRequest(group_id=g, page_token="%%%"),
        "page_token",
        id="history-garbage-token",
    ),
    pytest.param(
        "ListOffsetHistory",
        lambda g, t: pb.ListOffsetHistoryRequest(group_id=g, page_token=token_of("a")),
        "page_token",
        id="history-string-token",
    ),
    pytest.param(
        "ListOffsetHistory",
        lambda g, t: pb.ListOffsetHistoryRequest(group_id=g, since=Timestamp(seconds=1, nanos=-1)),
        "since",
        id="history-invalid-since",
    ),
    pytest.param(
        "ListOffsetHistory",
        lambda g, t: pb.ListOffsetHistoryRequest(group_id=g, topics=[sel(t, 1, 1)]),
        "topics[0].partitions[1]",
        id="history-same-partition-twice",
    ),
    # ReportWatermarks
    pytest.param(
        "ReportWatermarks",
        lambda g, t: pb.ReportWatermarksRequest(watermarks=[wm(t), wm(t, 1, 10, 9)]),
        "watermarks[1].log_end_offset",
        id="watermarks-end-below-start",
    ),
    pytest.param(
        "ReportWatermarks",
        lambda g, t: pb.ReportWatermarksRequest(watermarks=[wm(t), wm(t, 1, -2, 9)]),
        "watermarks[1].log_start_offset",
        id="watermarks-negative-start",
    ),
    pytest.param(
        "ReportWatermarks",
        lambda g, t: pb.ReportWatermarksRequest(watermarks=[wm(t), wm(t, 0)]),
        "watermarks[1].partition",
        id="watermarks-same-partition-twice",
    ),
    pytest.param(
        "ReportWatermarks",
        lambda g, t: pb.ReportWatermarksRequest(watermarks=[wm(t), wm(t, -1)]),
        "watermarks[1].partition",
        id="watermarks-negative-partition",
    ),
    pytest.param(
        "ReportWatermarks",
        lambda g, t: pb.ReportWatermarksRequest(watermarks=[wm(t), wm(t + "ü", 1)]),
        "watermarks[1].topic",
        id="watermarks-bad-topic",
    ),
    pytest.param(
        "ReportWatermarks",
        lambda g, t: pb.ReportWatermarksRequest(watermarks=[wm(t, p) for p in range(MAX_PARTITIONS + 1)]),
        "watermarks",
        id="watermarks-10001-partitions",
    ),
]


@pytest.mark.parametrize(("rpc", "build", "field"), CASES)
def test_bad_input_is_invalid_argument_naming_the_field_and_writes_nothing(
    stub, client, engine, group_id, topic, rpc, build, field
):
    request = build(group_id, topic)
    assert_invalid_argument(lambda: getattr(stub, rpc)(request, timeout=30), field)
    assert_nothing_written(engine, client, group_id, topic)


# Through the Python client: the same errors arrive as InvalidArgumentError with violations.


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(lambda c, g, t: c.commit_offsets("", {(t, 0): 1}), "group_id", id="commit-empty-group-id"),
        pytest.param(
            lambda c, g, t: c.commit_offsets(g, [OffsetCommit(t, 0, 1), OffsetCommit(t, 0, 2)]),
            "offsets[1].partition",
            id="commit-same-partition-twice",
        ),
        pytest.param(
            lambda c, g, t: c.fetch_offsets(g, {t: [2, 2]}), "topics[0].partitions[1]", id="fetch-same-partition-twice"
        ),
        pytest.param(lambda c, g, t: c.reset_offsets(g, to_offset=1), "topics", id="reset-no-selection"),
        pytest.param(
            lambda c, g, t: c.reset_offsets(g, topics=[t], all_topics=True, to_offset=1),
            "all_topics",
            id="reset-both-selections",
        ),
        pytest.param(lambda c, g, t: c.reset_offsets(g, all_topics=True), "target", id="reset-no-target"),
        pytest.param(
            lambda c, g, t: c.list_groups(page_token="not a token"), "page_token", id="list-groups-garbage-token"
        ),
    ],
)
def test_the_client_raises_invalid_argument_with_violations(client, engine, group_id, topic, call, field):
    with pytest.raises(InvalidArgumentError) as caught:
        call(client, group_id, topic)
    assert [v.field for v in caught.value.violations] == [field]
    assert_clean_message(str(caught.value))
    assert_nothing_written(engine, client, group_id, topic)


# --- limits: the largest accepted values ---


@pytest.mark.parametrize("filler", ["x", "é"], ids=["ascii", "multibyte"])
def test_a_group_id_of_255_bytes_is_accepted(client, group_id, topic, filler):
    long_id = padded(group_id, 255, filler)
    assert len(long_id.encode()) == 255
    client.commit_offsets(long_id, {(topic, 0): 1})
    assert client.describe_group(long_id).group_id == long_id
    assert [g.group_id for g in client.list_groups(long_id).items] == [long_id]


def test_the_longest_topic_and_every_allowed_character_are_accepted(client, group_id, topic):
    longest = topic.ljust(249, "x")
    every_char = f"{topic}-ABCXYZabcxyz0189._-"
    client.commit_offsets(group_id, {(longest, 0): 1, (every_char, 0): 2})
    assert client.fetch_offsets(group_id).offsets.keys() == {(longest, 0), (every_char, 0)}


@pytest.mark.parametrize("metadata", ["m" * 4096, "é" * 2048, "🦄" * 1024], ids=["ascii", "two-byte", "four-byte"])
def test_metadata_of_4096_bytes_is_accepted(client, group_id, topic, metadata):
    client.commit_offsets(group_id, [OffsetCommit(topic, 0, 1, metadata)])
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].metadata == metadata


@pytest.fixture
def full_group(client, group_id, topic) -> str:
    """A group with offsets for the most partitions one request may carry (offset = partition + 1)."""
    committed = client.commit_offsets(group_id, {(topic, p): p + 1 for p in range(MAX_PARTITIONS)})
    assert len(committed) == MAX_PARTITIONS
    return group_id


def test_10000_partitions_commit_and_describe(client, full_group, topic):
    partitions = client.describe_group(full_group).partitions
    assert len(partitions) == MAX_PARTITIONS
    assert (partitions[-1].partition, partitions[-1].offset) == (MAX_PARTITIONS - 1, MAX_PARTITIONS)


def test_10000_named_partitions_fetch(client, full_group, topic):
    fetched = client.fetch_offsets(full_group, {topic: range(MAX_PARTITIONS)}).offsets
    assert len(fetched) == MAX_PARTITIONS
    assert fetched[TopicPartition(topic, MAX_PARTITIONS - 1)].offset == MAX_PARTITIONS


def test_10000_compare_and_set_commits(client, full_group, topic):
    client.commit_offsets(
        full_group, [OffsetCommit(topic, p, p + 2, expected_offset=p + 1) for p in range(MAX_PARTITIONS)]
    )
    assert client.fetch_offsets(full_group).offsets[TopicPartition(topic, 0)].offset == 2


def test_10000_named_partitions_reset(client, full_group, topic):
    result = client.reset_offsets(full_group, topics={topic: range(MAX_PARTITIONS)}, to_offset=0)
    assert len(result.changes) == MAX_PARTITIONS
    assert {o.offset for o in client.fetch_offsets(full_group).offsets.values()} == {0}


def test_10000_named_partitions_history(client, full_group, topic):
    page = client.list_offset_history(full_group, topics={topic: range(MAX_PARTITIONS)}, page_size=1000)
    assert len(page.items) == 1000


def test_10000_named_partitions_delete(client, full_group, topic):
    assert len(client.delete_offsets(full_group, topics={topic: range(MAX_PARTITIONS)})) == MAX_PARTITIONS
    assert client.fetch_offsets(full_group).offsets == {}


def test_10000_watermarks(client, full_group, topic):
    client.report_watermarks([Watermark(topic, p, 0, p + 11) for p in range(MAX_PARTITIONS)])
    assert {p.lag for p in client.describe_group(full_group).partitions} == {10}


def test_extreme_but_valid_numbers_are_accepted(client, group_id, topic):
    client.commit_offsets(group_id, [OffsetCommit(topic, 2**31 - 1, INT64_MAX, expected_offset=-1)])
    client.commit_offsets(group_id, [OffsetCommit(topic, 2**31 - 1, 0, expected_offset=INT64_MAX)])
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 2**31 - 1)].offset == 0


# --- crafted input that passes the checks and must still not reach the database as an error ---


def test_a_crafted_group_page_token_holding_nul_is_invalid_argument(stub, group_id):
    request = pb.ListGroupsRequest(prefix=group_id, page_token=token_of("\x00"))
    assert_invalid_argument(lambda: stub.ListGroups(request), "page_token")


def test_a_crafted_history_page_token_beyond_int64_is_invalid_argument(stub, group_id):
    request = pb.ListOffsetHistoryRequest(group_id=group_id, page_token=token_of(2**64))
    assert_invalid_argument(lambda: stub.ListOffsetHistory(request), "page_token")


def test_shifts_beyond_int64_saturate(client, group_id, topic):
    # Any int64 shift is valid input; the sum is clamped to [0, INT64_MAX], never overflows.
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.reset_offsets(group_id, topics=[topic], shift_by=INT64_MAX)
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == INT64_MAX
    client.reset_offsets(group_id, topics=[topic], shift_by=INT64_MAX)
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == INT64_MAX
    client.reset_offsets(group_id, topics=[topic], shift_by=-INT64_MAX - 1)
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 0


def test_errors_from_database_failures_carry_no_database_text(database_url, engine, group_id, topic):
    # Real database failures, each answered STORE_UNAVAILABLE without what the database said.
    from offsetstore.server.app import OffsetStoreServer
    from offsetstore.storage.engine import create_engine
    from offsetstore.storage.store import Store

    name = f"offsetstore-failing-{group_id}"
    store = Store(
        create_engine(database_url, pool_size=2, statement_timeout_ms=300, application_name=name),
        statement_timeout_ms=300,
    )
    failures = []
    with OffsetStoreServer(store, "127.0.0.1:0", max_workers=4) as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            stub.CommitOffsets(commit(group_id, oc(topic)), timeout=10)

            # 1. Another session holds the group's row lock past the statement and lock timeouts.
            with engine.connect() as locker:
                locker.execute(
                    sa.text("SELECT 1 FROM offsetstore.groups WHERE group_id = :g FOR UPDATE"), {"g": group_id}
                )
                failures.append(failure(lambda: stub.CommitOffsets(commit(group_id, oc(topic, 0, 2)), timeout=10)))
                locker.rollback()

            # 2. A read waits past its lock timeout behind another session's lock of the table.
            with engine.connect() as locker:
                locker.execute(sa.text("LOCK TABLE offsetstore.offsets IN ACCESS EXCLUSIVE MODE"))
                failures.append(
                    failure(lambda: stub.FetchOffsets(pb.FetchOffsetsRequest(group_id=group_id), timeout=10))
                )
                locker.rollback()

            # 3. The server's idle connections are killed under it: the pools check a connection
            # when they hand it out and replace a dead one, so the next call is served.
            with engine.begin() as conn:
                killed = conn.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = :a"
                    ),
                    {"a": name},
                ).scalar_one()
            assert killed >= 1
            served = stub.FetchOffsets(pb.FetchOffsetsRequest(group_id=group_id), timeout=10)
            assert [o.offset for o in served.offsets] == [1]
    store.dispose()

    for error, info, _ in failures:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        assert info is not None and info.reason == "STORE_UNAVAILABLE"
        assert_clean_message(error.details())
        assert_clean_message(error.debug_error_string())
    with engine.connect() as conn:
        stored = conn.execute(
            sa.text('SELECT "offset" FROM offsetstore.offsets WHERE group_id = :g'), {"g": group_id}
        ).scalar_one()
    assert stored == 1  # the failed commit wrote nothing


# --- hostile strings are data ---

HOSTILE = [
    pytest.param('it\'s "quoted"', id="quotes"),
    pytest.param("'; DROP TABLE offsetstore.offsets; --", id="sql-injection"),
    pytest.param('"; DELETE FROM offsetstore.groups; --', id="sql-injection-double-quote"),
    pytest.param("%s %(group_id)s %%", id="format-placeholders"),
    pytest.param("$1 $$ $tag$", id="dollar-placeholders"),
    pytest.param("back\\slash \\' \\x00 \\n", id="backslashes"),
    pytest.param("100%_match*?", id="like-wildcards"),
    pytest.param("🦄 🚀 👩‍👩‍👧", id="emoji"),
    pytest.param("Grüße, 日本語, ¿qué?, Ωμέγα", id="non-ascii"),
    pytest.param("tab\tnew\nline\rcr", id="control-characters"),
]


def assert_tables_exist(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        for table in ("groups", "offsets", "offset_history", "watermarks"):
            assert conn.execute(sa.text(f"SELECT to_regclass('offsetstore.{table}')")).scalar_one() is not None


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_group_ids_and_metadata_round_trip_as_data(client, engine, group_id, topic, hostile):
    gid = f"{group_id}{hostile}"
    client.commit_offsets(gid, [OffsetCommit(topic, 0, 5, hostile)])
    assert client.join_group(gid, member_id=hostile) == 1

    fetched = client.fetch_offsets(gid).offsets[TopicPartition(topic, 0)]
    assert (fetched.offset, fetched.metadata) == (5, hostile)
    description = client.describe_group(gid)
    assert (description.group_id, description.generation, description.partitions[0].metadata) == (gid, 1, hostile)
    assert [g.group_id for g in client.list_groups(gid).items] == [gid]
    assert [c.new_offset for c in client.list_offset_history(gid).items] == [5]
    client.reset_offsets(gid, all_topics=True, to_offset=7)
    assert client.delete_offsets(gid, all_topics=True) == [TopicPartition(topic, 0)]
    assert_tables_exist(engine)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_list_prefixes_match_literally(client, engine, group_id, hostile):
    client.join_group(f"{group_id}{hostile}")
    client.join_group(f"{group_id}-plain")
    assert [g.group_id for g in client.list_groups(f"{group_id}{hostile}").items] == [f"{group_id}{hostile}"]
    # A prefix that is the hostile string itself lists the group that starts with it, and only such groups.
    client.join_group(f"{hostile}{group_id}")
    listed = [g.group_id for g in client.list_groups(hostile, page_size=1000).items]
    assert f"{hostile}{group_id}" in listed
    assert all(g.startswith(hostile) for g in listed)
    assert_tables_exist(engine)


def test_a_hostile_string_in_every_text_field_of_one_commit(client, engine, group_id, topic):
    hostile = "'); DROP TABLE offsetstore.offset_history; --"
    client.commit_offsets(
        group_id + hostile,
        [OffsetCommit(topic, p, p, hostile * 40) for p in range(3)],  # 1,800 bytes of it per partition
    )
    fetched = client.fetch_offsets(group_id + hostile).offsets
    assert {o.metadata for o in fetched.values()} == {hostile * 40}
    assert_tables_exist(engine)
