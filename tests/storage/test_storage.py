"""The storage core on its own: each operation over a caller's Connection, inside the caller's transaction."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.errors import GroupNotFoundError, InvalidArgumentError, OffsetMismatchError, StaleGenerationError
from offsetstore.core.types import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    Boundary,
    ChangeKind,
    OffsetCommit,
    TopicPartition,
    Watermark,
)
from tests.fixtures.storage import committed, db_now, group_row, history, moves, stored, violated_fields

# --- the caller owns the transaction ---


def test_a_rolled_back_commit_leaves_no_offset_no_history_and_no_group(engine, group_id, topic):
    with engine.connect() as conn:
        tx = conn.begin()
        result = storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 7)])
        assert [(c.topic, c.partition, c.offset) for c in result] == [(topic, 0, 5), (topic, 1, 7)]
        assert stored(conn, group_id) == {(topic, 0): 5, (topic, 1): 7}  # visible inside the transaction
        tx.rollback()

    with engine.connect() as conn:
        assert stored(conn, group_id) == {}
        assert history(conn, group_id) == []
        assert group_row(conn, group_id) is None
        with pytest.raises(GroupNotFoundError):
            storage.describe_group(conn, group_id)


def test_operations_never_commit_on_their_own(engine, group_id, topic):
    with engine.connect() as writer:
        tx = writer.begin()
        storage.commit_offsets(writer, group_id, [OffsetCommit(topic, 0, 5)])
        storage.join_group(writer, group_id)
        # Another connection does not see uncommitted work.
        assert committed(engine, stored, group_id) == {}
        assert committed(engine, group_row, group_id) is None
        tx.commit()
    assert committed(engine, stored, group_id) == {(topic, 0): 5}
    assert committed(engine, group_row, group_id) == (1, 0)


def test_failed_compare_and_set_in_a_multi_partition_commit_writes_nothing(engine, group_id, topic):
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5)])
    before = committed(engine, history, group_id)

    with pytest.raises(OffsetMismatchError) as caught, engine.begin() as conn:
        storage.commit_offsets(
            conn,
            group_id,
            [
                OffsetCommit(topic, 0, 6, expected_offset=5),  # would succeed alone
                OffsetCommit(topic, 1, 3),
                OffsetCommit(topic, 2, 9, expected_offset=4),  # nothing stored: fails
            ],
        )
    assert caught.value.stored_offset == NO_OFFSET
    assert caught.value.metadata["partition"] == "2"

    assert committed(engine, stored, group_id) == {(topic, 0): 5}
    assert committed(engine, history, group_id) == before


def test_failed_commit_to_a_new_group_leaves_no_group_after_rollback(engine, group_id, topic):
    with pytest.raises(OffsetMismatchError), engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 1, expected_offset=0)])
    assert committed(engine, group_row, group_id) is None


# --- commit ---


def test_commit_returns_offsets_in_request_order_with_commit_time(conn, group_id, topic):
    now = conn.execute(sa.select(sa.func.now())).scalar_one()
    result = storage.commit_offsets(
        conn, group_id, [OffsetCommit(topic, 3, 30, "c"), OffsetCommit(topic, 1, 10, "a"), OffsetCommit(topic, 2, 20)]
    )
    assert [(c.partition, c.offset, c.metadata) for c in result] == [(3, 30, "c"), (1, 10, "a"), (2, 20, "")]
    # The time of the commit's statement, not the transaction's start (now()).
    (stamp,) = {c.commit_time for c in result}
    assert stamp > now


def test_commit_records_history_only_for_offsets_that_changed(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 5)])
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5, "new metadata"), OffsetCommit(topic, 1, 6)])

    newest, *first_commit = history(conn, group_id)
    assert moves([newest]) == [(topic, 1, 5, 6, ChangeKind.COMMIT)]
    assert sorted(moves(first_commit)) == [
        (topic, 0, NO_OFFSET, 5, ChangeKind.COMMIT),
        (topic, 1, NO_OFFSET, 5, ChangeKind.COMMIT),
    ]
    assert storage.fetch_offsets(conn, group_id).offsets[TopicPartition(topic, 0)].metadata == "new metadata"


def test_commit_records_the_group_generation_and_the_actor(conn, group_id, topic):
    storage.join_group(conn, group_id)
    storage.join_group(conn, group_id)
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 1)], actor="unfenced")
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 2)], generation=2, actor="fenced")
    assert [(c.generation, c.actor) for c in history(conn, group_id)] == [(2, "fenced"), (2, "unfenced")]


def test_commit_with_a_stale_generation_raises_with_the_current_one(conn, group_id, topic):
    storage.join_group(conn, group_id)
    storage.join_group(conn, group_id)
    with pytest.raises(StaleGenerationError) as caught:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 1)], generation=1)
    assert caught.value.current_generation == 2


def test_commit_with_a_generation_to_an_unknown_group_is_stale(engine, group_id, topic):
    with pytest.raises(StaleGenerationError) as caught, engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 1)], generation=1)
    assert caught.value.current_generation == 0
    assert committed(engine, group_row, group_id) is None


def test_empty_commit_checks_the_generation_and_creates_nothing(conn, group_id):
    assert storage.commit_offsets(conn, group_id, []) == []
    assert group_row(conn, group_id) is None

    with pytest.raises(StaleGenerationError) as caught:
        storage.commit_offsets(conn, group_id, [], generation=1)
    assert caught.value.current_generation == 0

    storage.join_group(conn, group_id)
    assert storage.commit_offsets(conn, group_id, [], generation=1) == []
    assert history(conn, group_id) == []


def test_compare_and_set(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5, expected_offset=NO_OFFSET)])
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 8, expected_offset=5)])
    with pytest.raises(OffsetMismatchError) as caught:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 9, expected_offset=5)])
    assert caught.value.stored_offset == 8
    with pytest.raises(OffsetMismatchError) as caught:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 9, expected_offset=NO_OFFSET)])
    assert caught.value.stored_offset == 8
    assert stored(conn, group_id) == {(topic, 0): 8}


@pytest.mark.parametrize(
    ("commit", "field"),
    [
        pytest.param(OffsetCommit("ok", 2**31, 0), "offsets[0].partition", id="partition-over-int32"),
        pytest.param(OffsetCommit("ok", 0, 2**63), "offsets[0].offset", id="offset-over-int64"),
        pytest.param(
            OffsetCommit("ok", 0, 0, expected_offset=2**63), "offsets[0].expected_offset", id="expected-over-int64"
        ),
    ],
)
def test_commit_rejects_values_beyond_the_wire_types(conn, group_id, commit, field):
    with pytest.raises(InvalidArgumentError) as caught:
        storage.commit_offsets(conn, group_id, [commit])
    assert violated_fields(caught.value) == [field]


# --- fetch and describe ---


def test_fetch_names_partitions_without_offsets_and_reports_generation(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5, "m")])
    storage.join_group(conn, group_id)
    result = storage.fetch_offsets(conn, group_id, {topic: (0, 1)})
    assert result.generation == 1
    assert [(o.partition, o.offset, o.metadata) for o in result.offsets.values()] == [(0, 5, "m"), (1, NO_OFFSET, "")]
    assert result.offsets[TopicPartition(topic, 1)].commit_time is None


def test_fetch_of_an_unknown_group_is_empty_with_generation_0(conn, group_id):
    result = storage.fetch_offsets(conn, group_id)
    assert (result.offsets, result.generation) == ({}, 0)


def test_describe_resolves_lag_from_watermarks_and_sentinels(conn, group_id, topic):
    storage.commit_offsets(
        conn, group_id, [OffsetCommit(topic, 0, 40), OffsetCommit(topic, 1, 120), OffsetCommit(topic, 4, 7)]
    )
    storage.reset_offsets(conn, group_id, {topic: (2,)}, to_boundary=Boundary.EARLIEST)
    storage.reset_offsets(conn, group_id, {topic: (3,)}, to_boundary=Boundary.LATEST)
    storage.report_watermarks(
        conn,
        [
            Watermark(topic, 0, 10, 100),
            Watermark(topic, 1, 10, 100),
            Watermark(topic, 2, 10, 100),
            Watermark(topic, 3, 10, 100),
        ],
    )
    description = storage.describe_group(conn, group_id)
    assert description.generation == 2
    assert [
        (p.partition, p.offset, p.log_start_offset, p.log_end_offset, p.lag, p.offset_past_log_end)
        for p in description.partitions
    ] == [
        (0, 40, 10, 100, 60, False),
        # Beyond the log end: an anomaly, flagged, and its lag is unknown, never 0 (issue 23).
        (1, 120, 10, 100, NO_OFFSET, True),
        (2, EARLIEST, 10, 100, 90, False),  # the earliest sentinel counts from the log start
        (3, LATEST, 10, 100, 0, False),
        (4, 7, NO_OFFSET, NO_OFFSET, NO_OFFSET, False),  # no watermark reported
    ]
    # The group's total lag is unknown too, rather than a sum that leaves the anomaly out.
    (summary,) = [g for g in storage.list_groups(conn, group_id).items if g.group_id == group_id]
    assert summary.total_lag == NO_OFFSET


def test_describe_of_an_unknown_group_raises(conn, group_id):
    with pytest.raises(GroupNotFoundError):
        storage.describe_group(conn, group_id)


# --- join ---


def test_join_creates_the_group_at_generation_1_then_increments(conn, group_id):
    assert [storage.join_group(conn, group_id, f"member-{i}") for i in range(3)] == [1, 2, 3]
    assert group_row(conn, group_id) == (3, 0)


# --- reset ---


def test_reset_to_offset_bumps_generation_and_reset_count(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5, "kept?")])
    storage.join_group(conn, group_id)

    result = storage.reset_offsets(conn, group_id, {topic: (0, 1)}, to_offset=100, actor="operator")

    assert (result.generation, result.dry_run) == (2, False)
    assert moves(result.changes) == [(topic, 0, 5, 100, ChangeKind.RESET), (topic, 1, NO_OFFSET, 100, ChangeKind.RESET)]
    assert {(c.generation, c.actor) for c in result.changes} == {(2, "operator")}
    assert group_row(conn, group_id) == (2, 1)
    fetched = storage.fetch_offsets(conn, group_id).offsets
    assert [(o.offset, o.metadata) for o in fetched.values()] == [(100, ""), (100, "")]
    assert sorted(moves(history(conn, group_id)[:2])) == moves(result.changes)


def test_reset_to_offset_does_not_clamp_to_watermarks(conn, group_id, topic):
    storage.report_watermarks(conn, [Watermark(topic, 0, 10, 50)])
    storage.reset_offsets(conn, group_id, {topic: (0,)}, to_offset=500)
    assert stored(conn, group_id) == {(topic, 0): 500}


def test_reset_of_an_unknown_group_creates_it(conn, group_id, topic):
    result = storage.reset_offsets(conn, group_id, {topic: (0,)}, to_offset=3)
    assert result.generation == 1
    assert group_row(conn, group_id) == (1, 1)


def test_reset_of_an_existing_group_bumps_the_generation_even_with_nothing_selected(conn, group_id, topic):
    storage.join_group(conn, group_id)
    result = storage.reset_offsets(conn, group_id, {topic: ()}, shift_by=1)
    assert (result.changes, result.generation) == ([], 2)


def test_dry_run_changes_nothing_and_reports_the_generation_it_would_establish(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5)])
    storage.join_group(conn, group_id)
    before = (stored(conn, group_id), history(conn, group_id), group_row(conn, group_id))

    result = storage.reset_offsets(conn, group_id, {topic: (0, 1)}, to_offset=0, dry_run=True)

    assert (result.generation, result.dry_run) == (1, True)
    assert moves(result.changes) == [(topic, 0, 5, 0, ChangeKind.RESET), (topic, 1, NO_OFFSET, 0, ChangeKind.RESET)]
    assert {c.generation for c in result.changes} == {2}
    assert (stored(conn, group_id), history(conn, group_id), group_row(conn, group_id)) == before


def test_dry_run_on_an_unknown_group_creates_nothing(conn, group_id, topic):
    result = storage.reset_offsets(conn, group_id, {topic: (0,)}, to_offset=1, dry_run=True)
    assert result.generation == 0
    assert [c.generation for c in result.changes] == [1]
    assert group_row(conn, group_id) is None


def test_shift_by_floors_at_zero_caps_at_log_end_and_skips_what_has_no_base(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, p, 20) for p in range(3)])
    storage.reset_offsets(conn, group_id, {topic: (3,)}, to_boundary=Boundary.LATEST)  # sentinel, no watermark
    storage.report_watermarks(conn, [Watermark(topic, 1, 0, 25)])

    down = storage.reset_offsets(conn, group_id, {topic: (0, 3, 4)}, shift_by=-50)
    assert moves(down.changes) == [(topic, 0, 20, 0, ChangeKind.RESET)]  # 3: sentinel, 4: no offset

    up = storage.reset_offsets(conn, group_id, {topic: (1, 2)}, shift_by=10)
    assert moves(up.changes) == [(topic, 1, 20, 25, ChangeKind.RESET), (topic, 2, 20, 30, ChangeKind.RESET)]
    assert stored(conn, group_id) == {(topic, 0): 0, (topic, 1): 25, (topic, 2): 30, (topic, 3): LATEST}


def test_shift_by_resolves_a_sentinel_through_a_known_watermark(conn, group_id, topic):
    storage.reset_offsets(conn, group_id, {topic: (0,)}, to_boundary=Boundary.EARLIEST)
    assert stored(conn, group_id) == {(topic, 0): EARLIEST}
    storage.report_watermarks(conn, [Watermark(topic, 0, 10, 100)])
    storage.reset_offsets(conn, group_id, {topic: ()}, shift_by=5)
    assert stored(conn, group_id) == {(topic, 0): 15}


def test_to_boundary_uses_watermarks_else_sentinels(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 50), OffsetCommit(topic, 1, 50)])
    storage.report_watermarks(conn, [Watermark(topic, 0, 10, 100)])

    storage.reset_offsets(conn, group_id, {topic: ()}, to_boundary=Boundary.EARLIEST)
    assert stored(conn, group_id) == {(topic, 0): 10, (topic, 1): EARLIEST}
    storage.reset_offsets(conn, group_id, {topic: ()}, to_boundary=Boundary.LATEST)
    assert stored(conn, group_id) == {(topic, 0): 100, (topic, 1): LATEST}


def test_to_commit_time_restores_offsets_of_that_instant(engine, group_id, topic):
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5)])
    instant = db_now(engine)
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 9), OffsetCommit(topic, 1, 3)])

    result = committed(engine, storage.reset_offsets, group_id, {topic: ()}, to_commit_time=instant)

    # Partition 1 had no offset then: a reset never deletes, it starts the partition over.
    assert moves(result.changes) == [(topic, 0, 9, 5, ChangeKind.RESET), (topic, 1, 3, EARLIEST, ChangeKind.RESET)]
    assert committed(engine, stored, group_id) == {(topic, 0): 5, (topic, 1): EARLIEST}
    assert sorted(moves(committed(engine, history, group_id)[:2])) == moves(result.changes)


def test_to_commit_time_with_a_history_change_time(engine, group_id, topic):
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5)])
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 9)])
    first = committed(engine, history, group_id)[-1]

    committed(engine, storage.reset_offsets, group_id, {topic: (0,)}, to_commit_time=first.change_time)
    assert committed(engine, stored, group_id) == {(topic, 0): 5}


@pytest.mark.parametrize("all_topics", [False, True], ids=["whole-topic", "all-topics"])
def test_to_commit_time_recreates_partitions_deleted_since(engine, group_id, topic, all_topics):
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 6)])
    instant = db_now(engine)
    committed(engine, storage.delete_offsets, group_id, {topic: (1,)})

    selection = None if all_topics else {topic: ()}
    committed(engine, storage.reset_offsets, group_id, selection, all_topics=all_topics, to_commit_time=instant)
    assert committed(engine, stored, group_id) == {(topic, 0): 5, (topic, 1): 6}


def test_to_commit_time_while_a_partition_was_deleted_gives_it_earliest(engine, group_id, topic):
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 1)])
    committed(engine, storage.delete_offsets, group_id, {topic: (0,)})
    instant = db_now(engine)
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 7)])

    dry = committed(engine, storage.reset_offsets, group_id, {topic: ()}, to_commit_time=instant, dry_run=True)
    assert moves(dry.changes) == [(topic, 0, 7, EARLIEST, ChangeKind.RESET), (topic, 1, 1, 1, ChangeKind.RESET)]
    committed(engine, storage.reset_offsets, group_id, {topic: ()}, to_commit_time=instant)
    assert committed(engine, stored, group_id) == {(topic, 0): EARLIEST, (topic, 1): 1}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"to_offset": 1}, "topics", id="no-selection"),
        pytest.param({"topics": {"t": ()}, "all_topics": True, "to_offset": 1}, "all_topics", id="both-selections"),
        pytest.param({"topics": {"t": ()}}, "target", id="no-target"),
        pytest.param({"topics": {"t": ()}, "to_offset": 1, "shift_by": 1}, "target", id="two-targets"),
        pytest.param({"topics": {"t": ()}, "to_offset": -1}, "to_offset", id="negative-to-offset"),
    ],
)
def test_reset_argument_rules(conn, group_id, kwargs, field):
    with pytest.raises(InvalidArgumentError) as caught:
        storage.reset_offsets(conn, group_id, **kwargs)
    assert violated_fields(caught.value) == [field]
    assert group_row(conn, group_id) is None
