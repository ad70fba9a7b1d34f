"""Bad input: every row of the contract's error table is INVALID_ARGUMENT naming the field, and writes nothing.

Also the other side of the coin: strings that look like SQL or format strings are plain data,
and no error message carries database text.
"""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from offsetstore.client import (
    InvalidArgumentError,
    OffsetCommit,
)
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.bad_input import (
    MAX_PARTITIONS,
    assert_clean_message,
    assert_invalid_argument,
    assert_nothing_written,
    commit,
    oc,
    padded,
    reset,
    sel,
    token_of,
    wm,
)

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
