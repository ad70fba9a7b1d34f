"""The reading RPCs of offsetstore.v1 (ListGroups, DescribeGroup, ListOffsetHistory), errors on the wire,
health and reflection, through the real in-process server."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from offsetstore.client import (
    NO_OFFSET,
    ChangeKind,
    GroupNotFoundError,
    OffsetCommit,
    TopicPartition,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.service import history, moves, rich_error

# --- CommitOffsets ---

# --- ListGroups ---


def test_list_groups_pages_through_a_prefix(client, group_id, topic):
    ids = [f"{group_id}-{i}" for i in range(7)]
    for gid in reversed(ids):
        client.commit_offsets(gid, {(topic, 0): 1})

    pages, token = [], ""
    while True:
        page = client.list_groups(group_id, page_size=3, page_token=token)
        pages.append([g.group_id for g in page.items])
        token = page.next_page_token
        if not token:
            break
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]
    assert [g.group_id for g in client.iter_groups(group_id, page_size=2)] == ids


def test_list_groups_summaries(client, group_id, topic):
    lagging, unknown = f"{group_id}-a", f"{group_id}-b"
    client.commit_offsets(lagging, {(topic, 0): 40, (topic, 1): 90})
    client.join_group(lagging)
    client.commit_offsets(unknown, {(topic, 0): 40, (topic, 5): 1})
    client.report_watermarks([Watermark(topic, 0, 0, 100), Watermark(topic, 1, 0, 100)])
    last_commit = client.fetch_offsets(unknown).offsets[TopicPartition(topic, 5)].commit_time

    summaries = client.list_groups(group_id).items

    assert [(g.group_id, g.generation, g.partition_count, g.total_lag) for g in summaries] == [
        (lagging, 1, 2, 60 + 10),
        (unknown, 0, 2, NO_OFFSET),  # partition 5 has no known log end
    ]
    assert summaries[1].last_commit_time == last_commit


def test_list_groups_filters_by_prefix(client, group_id):
    client.join_group(f"{group_id}-x-1")
    client.join_group(f"{group_id}-y-1")
    assert [g.group_id for g in client.list_groups(f"{group_id}-x").items] == [f"{group_id}-x-1"]


# --- DescribeGroup ---


def test_describe_group_reports_lag_from_watermarks(client, group_id, topic):
    client.join_group(group_id)
    client.commit_offsets(
        group_id, [OffsetCommit(topic, 0, 40, "m0"), OffsetCommit(topic, 1, 120), OffsetCommit(topic, 2, 5)]
    )
    client.report_watermarks([Watermark(topic, 0, 0, 100), Watermark(topic, 1, 0, 100)])

    description = client.describe_group(group_id)

    assert (description.group_id, description.generation) == (group_id, 1)
    assert [
        (p.partition, p.offset, p.metadata, p.log_end_offset, p.lag, p.offset_past_log_end)
        for p in description.partitions
    ] == [
        (0, 40, "m0", 100, 60, False),
        (1, 120, "", 100, NO_OFFSET, True),  # past the log end: an anomaly, never lag 0
        (2, 5, "", NO_OFFSET, NO_OFFSET, False),
    ]
    assert all(p.commit_time is not None for p in description.partitions)
    assert description.active_time is not None  # the join


def test_newer_watermarks_replace_older_ones(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 40})
    client.report_watermarks([Watermark(topic, 0, 0, 100)])
    client.report_watermarks([Watermark(topic, 0, 0, 150)])
    (partition,) = client.describe_group(group_id).partitions
    assert (partition.log_end_offset, partition.lag) == (150, 110)


def test_describe_an_unknown_group_is_not_found(client, group_id):
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)


# --- ListOffsetHistory ---


def test_history_is_newest_first_with_offsets_kinds_generations_and_actor(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    generation = client.join_group(group_id)
    client.commit_offsets(group_id, {(topic, 0): 9}, generation=generation)
    client.reset_offsets(group_id, topics=[topic], to_offset=3)
    client.delete_offsets(group_id, topics=[topic])

    changes = history(client, group_id)

    assert moves(changes) == [
        (topic, 0, 3, NO_OFFSET, ChangeKind.DELETE),
        (topic, 0, 9, 3, ChangeKind.RESET),
        (topic, 0, 5, 9, ChangeKind.COMMIT),
        (topic, 0, NO_OFFSET, 5, ChangeKind.COMMIT),
    ]
    assert [c.generation for c in changes[1:]] == [2, 1, 0]
    times = [c.change_time for c in changes]
    assert times == sorted(times, reverse=True)
    assert all(c.actor.startswith("ipv4:127.0.0.1:") for c in changes)


def test_history_pages(client, group_id, topic):
    for offset in range(1, 8):
        client.commit_offsets(group_id, {(topic, 0): offset})
    pages, token = [], ""
    while True:
        page = client.list_offset_history(group_id, page_size=3, page_token=token)
        pages.append([c.new_offset for c in page.items])
        token = page.next_page_token
        if not token:
            break
    assert pages == [[7, 6, 5], [4, 3, 2], [1]]


def test_history_since_inclusive_until_exclusive(client, group_id, topic):
    for offset in (1, 2, 3):
        client.commit_offsets(group_id, {(topic, 0): offset})
    third, second, _ = history(client, group_id)

    since = client.list_offset_history(group_id, since=second.change_time).items
    until = client.list_offset_history(group_id, until=second.change_time).items
    window = client.list_offset_history(group_id, since=second.change_time, until=third.change_time).items

    assert [c.new_offset for c in since] == [3, 2]
    assert [c.new_offset for c in until] == [1]
    assert [c.new_offset for c in window] == [2]


def test_history_filters_by_topics(client, group_id, topic):
    other = f"{topic}-b"
    client.commit_offsets(group_id, {(topic, 0): 1, (topic, 1): 1, (other, 0): 1})
    assert [(c.topic, c.partition) for c in client.list_offset_history(group_id, topics=[(topic, 1)]).items] == [
        (topic, 1)
    ]
    assert [(c.topic, c.partition) for c in client.list_offset_history(group_id, topics=[other]).items] == [(other, 0)]


# --- errors on the wire ---


def test_stale_generation_on_the_wire(stub, client, group_id, topic):
    client.join_group(group_id)
    client.join_group(group_id)
    request = pb.CommitOffsetsRequest(
        group_id=group_id, offsets=[pb.OffsetCommit(topic=topic, partition=0, offset=1)], generation=1
    )
    code, info, fields = rich_error(lambda: stub.CommitOffsets(request))
    assert (code, info.domain, info.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "offsetstore.v1",
        "STALE_GENERATION",
    )
    assert info.metadata["current_generation"] == "2"
    assert fields == []


def test_offset_mismatch_on_the_wire(stub, client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    request = pb.CommitOffsetsRequest(
        group_id=group_id, offsets=[pb.OffsetCommit(topic=topic, partition=0, offset=9, expected_offset=4)]
    )
    code, info, _ = rich_error(lambda: stub.CommitOffsets(request))
    assert (code, info.domain, info.reason) == (grpc.StatusCode.ABORTED, "offsetstore.v1", "OFFSET_MISMATCH")
    assert info.metadata["stored_offset"] == "5"


def test_group_not_found_on_the_wire(stub, group_id):
    code, info, _ = rich_error(lambda: stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group_id)))
    assert (code, info.domain, info.reason) == (grpc.StatusCode.NOT_FOUND, "offsetstore.v1", "GROUP_NOT_FOUND")


def test_invalid_argument_on_the_wire(stub, group_id, topic):
    request = pb.CommitOffsetsRequest(
        group_id=group_id,
        offsets=[
            pb.OffsetCommit(topic=topic, partition=0, offset=1),
            pb.OffsetCommit(topic=topic, partition=1, offset=-5),
        ],
    )
    code, info, fields = rich_error(lambda: stub.CommitOffsets(request))
    assert (code, info.domain, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "offsetstore.v1", "INVALID_ARGUMENT")
    assert fields == ["offsets[1].offset"]


def test_wire_offsets_round_trip_with_the_generated_stub(stub, group_id, topic):
    stub.CommitOffsets(
        pb.CommitOffsetsRequest(
            group_id=group_id, offsets=[pb.OffsetCommit(topic=topic, partition=2, offset=11, metadata="x")]
        )
    )
    response = stub.FetchOffsets(
        pb.FetchOffsetsRequest(group_id=group_id, topics=[pb.TopicSelection(topic=topic, partitions=[2, 3])])
    )
    assert [(o.partition, o.offset, o.metadata, o.HasField("commit_time")) for o in response.offsets] == [
        (2, 11, "x", True),
        (3, NO_OFFSET, "", False),
    ]


# --- health and reflection ---


def test_health_is_serving(client, server):
    assert client.health() == "SERVING"
    with grpc.insecure_channel(server.address) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="offsetstore.v1.OffsetStoreService"), timeout=5
        )
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(server):
    with grpc.insecure_channel(server.address) as channel:
        services = ProtoReflectionDescriptorDatabase(channel).get_services()
    assert "offsetstore.v1.OffsetStoreService" in services
    assert "grpc.health.v1.Health" in services
