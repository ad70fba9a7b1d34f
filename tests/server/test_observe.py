"""Observed groups (issue 57): ObserveOffsets records a pipeline's positions; nothing commits to them until adopted."""

from __future__ import annotations

import asyncio

import grpc
import psycopg
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.client import (
    AsyncOffsetStoreClient,
    ChangeKind,
    GroupCommittedError,
    GroupObservedError,
    InvalidArgumentError,
    OffsetStoreClient,
    TopicPartition,
    Watermark,
)
from offsetstore.core.types import GroupStatus, OffsetCommit
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.service import rich_error

SOURCE = "kafka:local/legacy-etl"


def test_observed_positions_are_stored_and_only_changes_write_history(
    client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    assert client.observe_offsets(group_id, {(topic, 0): 10, (topic, 1): 20}, source=SOURCE) == 2
    # The same positions again change nothing: no history, the commit time of the first stays.
    first = client.fetch_offsets(group_id).offsets
    assert client.observe_offsets(group_id, {(topic, 0): 10, (topic, 1): 20}, source=SOURCE) == 0
    assert client.observe_offsets(group_id, {(topic, 0): 15, (topic, 1): 20}, source=SOURCE) == 1
    fetched = client.fetch_offsets(group_id).offsets
    assert {tp: c.offset for tp, c in fetched.items()} == {TopicPartition(topic, 0): 15, TopicPartition(topic, 1): 20}
    assert fetched[TopicPartition(topic, 1)].commit_time == first[TopicPartition(topic, 1)].commit_time
    history = client.list_offset_history(group_id).items
    assert [(c.partition, c.previous_offset, c.new_offset, c.kind, c.source) for c in history] == [
        (0, 10, 15, ChangeKind.OBSERVED, SOURCE),
        (1, -1, 20, ChangeKind.OBSERVED, SOURCE),
        (0, -1, 10, ChangeKind.OBSERVED, SOURCE),
    ]


def test_an_observed_group_is_marked_and_judged_like_any_group(
    client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.report_watermarks([Watermark(topic, 0, 0, 100)])
    client.observe_offsets(group_id, {(topic, 0): 60}, source=SOURCE)
    client.report_watermarks([Watermark(topic, 0, 0, 100)])  # a log end observed after the position
    described = client.describe_group(group_id)
    assert (described.observed, described.observed_source) == (True, SOURCE)
    (p,) = described.partitions
    assert (p.offset, p.log_end_offset, p.lag) == (60, 100, 40)
    assert described.status is not GroupStatus.UNSPECIFIED
    (summary,) = client.list_groups(group_id).items
    assert (summary.observed, summary.observed_source, summary.total_lag) == (True, SOURCE, 40)
    committed = f"{group_id}-c"
    client.commit_offsets(committed, {(topic, 0): 1})
    assert not client.describe_group(committed).observed
    assert not client.list_groups(committed).items[0].observed


def test_a_commit_to_an_observed_group_is_refused_and_writes_nothing(
    stub, client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 10}, source=SOURCE)
    with pytest.raises(GroupObservedError) as refused:
        client.commit_offsets(group_id, {(topic, 0): 99})
    assert refused.value.metadata["observed_source"] == SOURCE
    # Unfenced or fenced, alone or batched with another group's commit: the same refusal.
    request = pb.CommitOffsetsRequest(
        group_id=group_id, offsets=[pb.OffsetCommit(topic=topic, partition=0, offset=99)], generation=5
    )
    code, info, _ = rich_error(lambda: stub.CommitOffsets(request))
    assert (code, info.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "GROUP_OBSERVED")
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 10
    assert [c.kind for c in client.list_offset_history(group_id).items] == [ChangeKind.OBSERVED]


def test_a_plain_reset_is_refused_a_dry_run_shows_and_an_adoption_makes_it_committed(
    client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 10}, source=SOURCE)
    with pytest.raises(GroupObservedError):
        client.reset_offsets(group_id, topics={topic: [0]}, to_offset=3)
    preview = client.reset_offsets(group_id, topics={topic: [0]}, to_offset=3, dry_run=True)
    assert [c.new_offset for c in preview.changes] == [3]
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 10
    # An adoption from its last observed position: one step, and commits are welcome after it.
    adopted = client.reset_offsets(
        group_id, topics={topic: [0]}, to_offsets={TopicPartition(topic, 0): 10}, source=f"observed {SOURCE}"
    )
    assert [c.kind for c in adopted.changes] == [ChangeKind.ADOPT]
    assert not client.describe_group(group_id).observed
    client.commit_offsets(group_id, {(topic, 0): 11})
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 11
    # Now committed, it is not observed again by accident.
    with pytest.raises(GroupCommittedError):
        client.observe_offsets(group_id, {(topic, 0): 12}, source=SOURCE)
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 11


def test_a_deleted_observed_group_can_be_observed_or_committed_again(
    client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 10, (topic, 1): 5}, source=SOURCE)
    client.delete_offsets(group_id, topics={topic: [1]})
    assert client.describe_group(group_id).observed  # a partial delete leaves it observed
    client.delete_offsets(group_id, all_topics=True)
    client.commit_offsets(group_id, {(topic, 0): 1})  # a deleted group's id is free for either
    other = f"{group_id}-o"
    client.commit_offsets(other, {(topic, 0): 1})
    client.delete_offsets(other, all_topics=True)
    assert client.observe_offsets(other, {(topic, 0): 7}, source=SOURCE) == 1
    assert client.describe_group(other).observed


def test_the_sinks_and_the_sql_api_are_refused_an_observed_group(
    client: OffsetStoreClient, engine: sa.Engine, database_url: str, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 10}, source=SOURCE)
    with engine.begin() as conn, pytest.raises(GroupObservedError):
        storage.lock_offsets(conn, group_id)  # the Spark sink's and the Kafka writer's entry
    with engine.begin() as conn, pytest.raises(GroupObservedError):
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 50)])
    conninfo = database_url.replace("postgresql+psycopg://", "postgresql://")
    for sql in (
        "SELECT * FROM offsetstore.begin_write(%s, 0)",
        "SELECT * FROM offsetstore.commit_offsets(%s, 0, ARRAY[%s], ARRAY[0], ARRAY[50::bigint])",
    ):
        with psycopg.connect(conninfo) as conn, pytest.raises(psycopg.Error) as refused:
            conn.execute(sql, (group_id, topic) if "ARRAY" in sql else (group_id,))
        assert refused.value.sqlstate == "OS005"
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 10


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ObserveOffsetsRequest(group_id="", source=SOURCE), "group_id"),
        (pb.ObserveOffsetsRequest(group_id="g", source=""), "source"),
        (pb.ObserveOffsetsRequest(group_id="g", source="a\x00b"), "source"),
        (
            pb.ObserveOffsetsRequest(
                group_id="g", source=SOURCE, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=-1)]
            ),
            "offsets[0].offset",
        ),
        (
            pb.ObserveOffsetsRequest(
                group_id="g",
                source=SOURCE,
                offsets=[pb.OffsetCommit(topic="t", partition=0, offset=1, expected_offset=0)],
            ),
            "offsets[0].expected_offset",
        ),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(stub, request_: pb.ObserveOffsetsRequest, field: str) -> None:
    code, info, fields = rich_error(lambda: stub.ObserveOffsets(request_))
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert field in fields


def test_the_async_client_observes_too(server: ServerHandle, client: OffsetStoreClient, group_id: str, topic: str):
    async def observe() -> int:
        async with AsyncOffsetStoreClient(server.address) as aclient:
            return await aclient.observe_offsets(group_id, {TopicPartition(topic, 0): 4}, source=SOURCE)

    assert asyncio.run(observe()) == 1
    assert client.describe_group(group_id).observed_source == SOURCE
    with pytest.raises(InvalidArgumentError):
        client.observe_offsets(group_id, {(topic, 0): 4}, source="")
