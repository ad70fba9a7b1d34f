"""Every RPC of offsetstore.v1 through the real in-process server, as a client sees it."""

from __future__ import annotations

import pytest

from offsetstore.client import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    Boundary,
    ChangeKind,
    GroupNotFoundError,
    InvalidArgumentError,
    OffsetCommit,
    OffsetMismatchError,
    StaleGenerationError,
    TopicPartition,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.service import generation_of, history, moves, offsets_of

# --- CommitOffsets ---


def test_commit_then_fetch(client, group_id, topic):
    committed = client.commit_offsets(group_id, [OffsetCommit(topic, 0, 42, "batch 7"), OffsetCommit(topic, 1, 0)])
    assert [(c.topic, c.partition, c.offset, c.metadata) for c in committed.values()] == [
        (topic, 0, 42, "batch 7"),
        (topic, 1, 0, ""),
    ]
    assert all(c.commit_time is not None for c in committed.values())

    fetched = client.fetch_offsets(group_id)
    assert fetched.generation == 0
    assert fetched.offsets == committed


def test_a_commits_answer_does_not_echo_its_metadata(stub, client, group_id, topic):
    # 100 partitions of 4 KB metadata: a 400 KB request must not buy a 400 KB answer.
    request = pb.CommitOffsetsRequest(
        group_id=group_id,
        offsets=[pb.OffsetCommit(topic=topic, partition=p, offset=7, metadata="m" * 4096) for p in range(100)],
    )
    answer = stub.CommitOffsets(request, timeout=10)
    assert [(c.partition, c.offset, c.metadata) for c in answer.offsets] == [(p, 7, "") for p in range(100)]
    assert all(c.HasField("commit_time") for c in answer.offsets)
    assert answer.ByteSize() < request.ByteSize() / 50
    # The metadata is stored all the same, and the Python client hands back what it sent.
    assert {c.metadata for c in client.fetch_offsets(group_id).offsets.values()} == {"m" * 4096}
    committed = client.commit_offsets(group_id, [OffsetCommit(topic, 0, 8, "batch 8"), OffsetCommit(topic, 1, 9)])
    assert [(c.offset, c.metadata) for c in committed.values()] == [(8, "batch 8"), (9, "")]


def test_commit_accepts_a_mapping_of_offsets(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 10, (topic, 3): 30})
    assert offsets_of(client, group_id) == {(topic, 0): 10, (topic, 3): 30}


def test_first_commit_creates_the_group(client, group_id, topic):
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)
    client.commit_offsets(group_id, {(topic, 0): 1})
    description = client.describe_group(group_id)
    assert (description.group_id, description.generation, len(description.partitions)) == (group_id, 0, 1)


def test_a_multi_partition_commit_with_one_failed_compare_and_set_stores_nothing(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    before = history(client, group_id)

    with pytest.raises(OffsetMismatchError) as caught:
        client.commit_offsets(
            group_id,
            [OffsetCommit(topic, 0, 6), OffsetCommit(topic, 1, 3, expected_offset=7), OffsetCommit(topic, 2, 9)],
        )
    assert caught.value.stored_offset == NO_OFFSET

    assert offsets_of(client, group_id) == {(topic, 0): 5}
    assert history(client, group_id) == before


def test_a_multi_partition_commit_with_one_invalid_partition_stores_nothing(client, group_id, topic):
    with pytest.raises(InvalidArgumentError) as caught:
        client.commit_offsets(group_id, [OffsetCommit(topic, 0, 6), OffsetCommit(topic, -1, 3)])
    assert [v.field for v in caught.value.violations] == ["offsets[1].partition"]
    assert offsets_of(client, group_id) == {}
    assert history(client, group_id) == []
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)


def test_expected_offset_minus_one_means_no_offset_yet(client, group_id, topic):
    client.commit_offsets(group_id, [OffsetCommit(topic, 0, 5, expected_offset=-1)])
    with pytest.raises(OffsetMismatchError) as caught:
        client.commit_offsets(group_id, [OffsetCommit(topic, 0, 6, expected_offset=-1)])
    assert caught.value.stored_offset == 5
    assert offsets_of(client, group_id) == {(topic, 0): 5}


def test_expected_offset_is_a_compare_and_set(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.commit_offsets(group_id, [OffsetCommit(topic, 0, 8, expected_offset=5)])
    with pytest.raises(OffsetMismatchError) as caught:
        client.commit_offsets(group_id, [OffsetCommit(topic, 0, 9, expected_offset=5)])
    assert caught.value.stored_offset == 8
    assert offsets_of(client, group_id) == {(topic, 0): 8}


def test_expected_offset_zero_is_not_the_same_as_none(client, group_id, topic):
    with pytest.raises(OffsetMismatchError) as caught:
        client.commit_offsets(group_id, [OffsetCommit(topic, 0, 1, expected_offset=0)])
    assert caught.value.stored_offset == NO_OFFSET
    assert offsets_of(client, group_id) == {}


def test_an_older_generation_is_fenced_with_the_current_one_in_the_error(client, group_id, topic):
    assert client.join_group(group_id, "old") == 1
    assert client.join_group(group_id, "new") == 2

    with pytest.raises(StaleGenerationError) as caught:
        client.commit_offsets(group_id, {(topic, 0): 1}, generation=1)
    assert caught.value.current_generation == 2
    with pytest.raises(StaleGenerationError) as caught:
        client.commit_offsets(group_id, {(topic, 0): 1}, generation=3)
    assert caught.value.current_generation == 2

    client.commit_offsets(group_id, {(topic, 0): 2}, generation=2)
    client.commit_offsets(group_id, {(topic, 1): 7})  # generation 0 is unfenced
    assert offsets_of(client, group_id) == {(topic, 0): 2, (topic, 1): 7}


def test_a_generation_for_an_unknown_group_is_stale_and_creates_nothing(client, group_id, topic):
    with pytest.raises(StaleGenerationError) as caught:
        client.commit_offsets(group_id, {(topic, 0): 1}, generation=1)
    assert caught.value.current_generation == 0
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)


def test_recommitting_the_same_offset_adds_no_history(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.commit_offsets(group_id, {(topic, 0): 6})
    assert moves(history(client, group_id)) == [
        (topic, 0, 5, 6, ChangeKind.COMMIT),
        (topic, 0, NO_OFFSET, 5, ChangeKind.COMMIT),
    ]


def test_an_empty_commit_creates_nothing_but_checks_the_generation(client, group_id):
    assert client.commit_offsets(group_id, []) == {}
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)
    client.join_group(group_id)
    with pytest.raises(StaleGenerationError) as caught:
        client.commit_offsets(group_id, [], generation=5)
    assert caught.value.current_generation == 1
    assert client.commit_offsets(group_id, [], generation=1) == {}
    assert history(client, group_id) == []


# --- FetchOffsets ---


def test_fetch_returns_minus_one_for_named_partitions_without_offsets(client, group_id, topic):
    client.commit_offsets(group_id, [OffsetCommit(topic, 0, 5, "m")])
    fetched = client.fetch_offsets(group_id, {topic: [0, 1]}).offsets
    assert [(o.partition, o.offset, o.metadata) for o in fetched.values()] == [(0, 5, "m"), (1, NO_OFFSET, "")]


def test_fetch_of_an_unknown_group_is_empty_with_generation_0(client, group_id, topic):
    result = client.fetch_offsets(group_id)
    assert (result.offsets, result.generation) == ({}, 0)
    named = client.fetch_offsets(group_id, [(topic, 3)])
    assert [(o.partition, o.offset) for o in named.offsets.values()] == [(3, NO_OFFSET)]
    assert named.generation == 0


def test_fetch_selects_whole_topics_and_single_partitions(client, group_id, topic):
    other = f"{topic}-b"
    client.commit_offsets(group_id, {(topic, 0): 1, (topic, 1): 2, (other, 0): 3, (other, 1): 4})
    assert set(client.fetch_offsets(group_id, [topic]).offsets) == {(topic, 0), (topic, 1)}
    assert set(client.fetch_offsets(group_id, [topic, (other, 1)]).offsets) == {(topic, 0), (topic, 1), (other, 1)}


def test_fetch_reports_the_generation(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 1})
    client.join_group(group_id)
    client.join_group(group_id)
    assert generation_of(client, group_id) == 2


# --- ResetOffsets ---


def test_reset_to_offset_creates_partitions_and_the_group(client, group_id, topic):
    result = client.reset_offsets(group_id, topics={topic: [0, 1]}, to_offset=7)
    assert (result.generation, result.dry_run) == (1, False)
    assert moves(result.changes) == [
        (topic, 0, NO_OFFSET, 7, ChangeKind.RESET),
        (topic, 1, NO_OFFSET, 7, ChangeKind.RESET),
    ]
    assert offsets_of(client, group_id) == {(topic, 0): 7, (topic, 1): 7}
    assert client.describe_group(group_id).generation == 1


def test_reset_to_offset_sets_exactly_that_offset(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5, (topic, 1): 5})
    client.report_watermarks([Watermark(topic, 0, 10, 50)])
    result = client.reset_offsets(group_id, topics=[topic], to_offset=500)
    assert moves(result.changes) == [(topic, 0, 5, 500, ChangeKind.RESET), (topic, 1, 5, 500, ChangeKind.RESET)]
    assert offsets_of(client, group_id) == {(topic, 0): 500, (topic, 1): 500}


def test_reset_clears_metadata(client, group_id, topic):
    client.commit_offsets(group_id, [OffsetCommit(topic, 0, 5, "from the job")])
    client.reset_offsets(group_id, all_topics=True, to_offset=0)
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].metadata == ""


def test_shift_by_floors_at_zero_and_caps_at_the_log_end(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 20, (topic, 1): 20, (topic, 2): 20})
    client.report_watermarks([Watermark(topic, 1, 0, 25)])

    down = client.reset_offsets(group_id, topics={topic: [0]}, shift_by=-50)
    up = client.reset_offsets(group_id, topics={topic: [1, 2]}, shift_by=10)

    assert moves(down.changes) == [(topic, 0, 20, 0, ChangeKind.RESET)]
    assert moves(up.changes) == [(topic, 1, 20, 25, ChangeKind.RESET), (topic, 2, 20, 30, ChangeKind.RESET)]
    assert offsets_of(client, group_id) == {(topic, 0): 0, (topic, 1): 25, (topic, 2): 30}


def test_shift_by_skips_partitions_without_an_offset(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 20})
    result = client.reset_offsets(group_id, topics={topic: [0, 1]}, shift_by=-5)
    assert moves(result.changes) == [(topic, 0, 20, 15, ChangeKind.RESET)]
    assert offsets_of(client, group_id) == {(topic, 0): 15}


def test_to_boundary_with_reported_watermarks(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 50, (topic, 1): 50})
    client.report_watermarks([Watermark(topic, 0, 10, 100), Watermark(topic, 1, 20, 200)])

    earliest = client.reset_offsets(group_id, topics=[topic], to_boundary=Boundary.EARLIEST)
    assert [c.new_offset for c in earliest.changes] == [10, 20]
    assert offsets_of(client, group_id) == {(topic, 0): 10, (topic, 1): 20}

    latest = client.reset_offsets(group_id, topics=[topic], to_boundary=Boundary.LATEST)
    assert [c.new_offset for c in latest.changes] == [100, 200]
    assert offsets_of(client, group_id) == {(topic, 0): 100, (topic, 1): 200}


def test_to_boundary_without_watermarks_stores_sentinels(client, group_id, topic):
    client.reset_offsets(group_id, topics={topic: [0]}, to_boundary=Boundary.EARLIEST)
    client.reset_offsets(group_id, topics={topic: [1]}, to_boundary=Boundary.LATEST)
    assert offsets_of(client, group_id) == {(topic, 0): EARLIEST, (topic, 1): LATEST}

    # Once watermarks are known, the sentinels count as those for the lag.
    client.report_watermarks([Watermark(topic, 0, 10, 100), Watermark(topic, 1, 10, 100)])
    lags = [(p.partition, p.lag) for p in client.describe_group(group_id).partitions]
    assert lags == [(0, 90), (1, 0)]


def test_to_commit_time_restores_the_offsets_of_that_instant(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    (first,) = history(client, group_id)
    client.commit_offsets(group_id, {(topic, 0): 9})
    client.commit_offsets(group_id, {(topic, 1): 3})

    result = client.reset_offsets(group_id, topics=[topic], to_commit_time=first.change_time)

    # Partition 1 had no offset then: a reset never deletes, it starts the partition over.
    assert moves(result.changes) == [(topic, 0, 9, 5, ChangeKind.RESET), (topic, 1, 3, EARLIEST, ChangeKind.RESET)]
    assert offsets_of(client, group_id) == {(topic, 0): 5, (topic, 1): EARLIEST}


def test_to_commit_time_with_all_topics_recreates_deleted_partitions(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5, (topic, 1): 6})
    client.commit_offsets(group_id, {(topic, 0): 8})
    instant = history(client, group_id)[0].change_time
    client.delete_offsets(group_id, topics={topic: [1]})

    client.reset_offsets(group_id, all_topics=True, to_commit_time=instant)
    assert offsets_of(client, group_id) == {(topic, 0): 8, (topic, 1): 6}


def test_a_dry_run_changes_nothing(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.join_group(group_id)
    offsets_before, history_before = client.fetch_offsets(group_id), history(client, group_id)

    result = client.reset_offsets(group_id, topics={topic: [0, 1]}, to_offset=0, dry_run=True)

    assert (result.generation, result.dry_run) == (1, True)
    assert moves(result.changes) == [(topic, 0, 5, 0, ChangeKind.RESET), (topic, 1, NO_OFFSET, 0, ChangeKind.RESET)]
    assert [c.generation for c in result.changes] == [2, 2]  # what the reset would establish
    assert client.fetch_offsets(group_id) == offsets_before
    assert history(client, group_id) == history_before
    client.commit_offsets(group_id, {(topic, 0): 6}, generation=1)  # the writer is still current


@pytest.mark.parametrize(
    "target",
    [
        pytest.param({"to_offset": 0}, id="to_offset"),
        pytest.param({"shift_by": -1}, id="shift_by"),
        pytest.param({"to_boundary": Boundary.LATEST}, id="to_boundary"),
    ],
)
def test_a_dry_run_of_every_target_changes_nothing(client, group_id, topic, target):
    client.commit_offsets(group_id, {(topic, 0): 5})
    before = (client.fetch_offsets(group_id), history(client, group_id))
    result = client.reset_offsets(group_id, all_topics=True, dry_run=True, **target)
    assert result.dry_run is True
    assert result.generation == 0
    assert (client.fetch_offsets(group_id), history(client, group_id)) == before


def test_a_reset_fences_writers_of_the_old_generation(client, group_id, topic):
    generation = client.join_group(group_id, "consumer")
    client.commit_offsets(group_id, {(topic, 0): 100}, generation=generation)

    result = client.reset_offsets(group_id, topics=[topic], to_offset=10)
    assert result.generation == generation + 1

    with pytest.raises(StaleGenerationError) as caught:
        client.commit_offsets(group_id, {(topic, 0): 101}, generation=generation)
    assert caught.value.current_generation == generation + 1
    assert offsets_of(client, group_id) == {(topic, 0): 10}


def test_reset_history_entries(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 5})
    result = client.reset_offsets(group_id, topics=[topic], to_offset=2)
    (entry, _) = history(client, group_id)
    assert moves([entry]) == [(topic, 0, 5, 2, ChangeKind.RESET)]
    assert entry.generation == result.generation == 1
    assert entry.change_time == result.changes[0].change_time
    assert entry.actor.startswith("ipv4:127.0.0.1:")


# --- DeleteOffsets ---


def test_delete_topics_deletes_those_offsets_and_fences(client, group_id, topic):
    generation = client.join_group(group_id)
    client.commit_offsets(group_id, {(topic, 0): 1, (topic, 1): 2, (topic, 2): 3}, generation=generation)

    deleted = client.delete_offsets(group_id, topics={topic: [0, 2]})

    assert deleted == [TopicPartition(topic, 0), TopicPartition(topic, 2)]
    assert offsets_of(client, group_id) == {(topic, 1): 2}
    with pytest.raises(StaleGenerationError):
        client.commit_offsets(group_id, {(topic, 0): 4}, generation=generation)
    assert sorted(moves(history(client, group_id)[:2])) == [
        (topic, 0, 1, NO_OFFSET, ChangeKind.DELETE),
        (topic, 2, 3, NO_OFFSET, ChangeKind.DELETE),
    ]


def test_delete_all_topics_deletes_the_group_and_keeps_its_history(client, group_id, topic):
    client.join_group(group_id)
    client.commit_offsets(group_id, {(topic, 0): 1, (topic, 1): 2})

    deleted = client.delete_offsets(group_id, all_topics=True)

    assert deleted == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with pytest.raises(GroupNotFoundError):
        client.describe_group(group_id)
    assert client.fetch_offsets(group_id).generation == 0
    assert sorted(moves(history(client, group_id)[:2])) == [
        (topic, 0, 1, NO_OFFSET, ChangeKind.DELETE),
        (topic, 1, 2, NO_OFFSET, ChangeKind.DELETE),
    ]
    assert client.list_groups(group_id).items == []


def test_delete_of_an_unknown_group_deletes_nothing(client, group_id, topic):
    assert client.delete_offsets(group_id, all_topics=True) == []
    assert client.delete_offsets(group_id, topics=[topic]) == []


# --- JoinGroup ---


def test_join_group_starts_at_1_and_increments(client, group_id):
    assert [client.join_group(group_id, f"member-{i}") for i in range(3)] == [1, 2, 3]
    assert client.describe_group(group_id).generation == 3
