"""The storage core's deletes and listings (groups, history) with their page tokens, over a caller's Connection."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.errors import GroupNotFoundError, InvalidArgumentError, StaleGenerationError
from offsetstore.core.types import (
    NO_OFFSET,
    ChangeKind,
    OffsetCommit,
    TopicPartition,
    Watermark,
)
from offsetstore.storage.schema import offset_history, offsets
from tests.fixtures.storage import committed, db_now, group_row, history, moves, stored, violated_fields

# --- delete ---


def test_delete_topics_deletes_offsets_records_history_and_bumps_generation(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, p, 10 + p) for p in range(3)])
    storage.join_group(conn, group_id)

    deleted = storage.delete_offsets(conn, group_id, {topic: (0, 2)}, actor="operator")

    assert deleted == [TopicPartition(topic, 0), TopicPartition(topic, 2)]
    assert stored(conn, group_id) == {(topic, 1): 11}
    assert group_row(conn, group_id)[0] == 2
    assert sorted(moves(history(conn, group_id)[:2])) == [
        (topic, 0, 10, NO_OFFSET, ChangeKind.DELETE),
        (topic, 2, 12, NO_OFFSET, ChangeKind.DELETE),
    ]
    with pytest.raises(StaleGenerationError):
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 1)], generation=1)


def test_delete_all_topics_deletes_the_group_but_keeps_history(conn, group_id, topic):
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 6)])
    storage.join_group(conn, group_id)
    storage.join_group(conn, group_id)

    deleted = storage.delete_offsets(conn, group_id, all_topics=True)

    assert deleted == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    # A tombstone keeps the generation (2 joins + the delete) and counts the delete.
    assert group_row(conn, group_id) == (3, 1)
    assert storage.fetch_offsets(conn, group_id).generation == 0
    with pytest.raises(GroupNotFoundError):
        storage.describe_group(conn, group_id)
    entries = history(conn, group_id)  # newest first; one operation's entries in no particular order
    assert sorted(moves(entries[:2])) == [
        (topic, 0, 5, NO_OFFSET, ChangeKind.DELETE),
        (topic, 1, 6, NO_OFFSET, ChangeKind.DELETE),
    ]
    assert sorted(moves(entries[2:])) == [
        (topic, 0, NO_OFFSET, 5, ChangeKind.COMMIT),
        (topic, 1, NO_OFFSET, 6, ChangeKind.COMMIT),
    ]


def test_delete_of_an_unknown_group_deletes_nothing(conn, group_id, topic):
    assert storage.delete_offsets(conn, group_id, all_topics=True) == []
    assert storage.delete_offsets(conn, group_id, {topic: ()}) == []
    assert group_row(conn, group_id) is None


# --- listings and their page tokens ---


def _insert_groups(conn: sa.Connection, prefix: str, count: int) -> None:
    conn.execute(
        sa.text(
            "INSERT INTO offsetstore.groups (group_id) "
            "SELECT :prefix || lpad(i::text, 5, '0') FROM generate_series(1, :count) AS i"
        ),
        {"prefix": prefix, "count": count},
    )


def test_list_groups_pages_through_a_prefix_in_order(conn, group_id):
    _insert_groups(conn, group_id, 7)
    expected = [f"{group_id}{i:05d}" for i in range(1, 8)]

    pages, token = [], ""
    while True:
        page = storage.list_groups(conn, group_id, page_size=3, page_token=token)
        pages.append([g.group_id for g in page.items])
        token = page.next_page_token
        if not token:
            break
    assert pages == [expected[0:3], expected[3:6], expected[6:7]]


def test_list_groups_page_size_default_and_maximum(conn, group_id):
    _insert_groups(conn, group_id, 1001)
    default = storage.list_groups(conn, group_id)
    assert (len(default.items), bool(default.next_page_token)) == (100, True)
    biggest = storage.list_groups(conn, group_id, page_size=5000)
    assert (len(biggest.items), bool(biggest.next_page_token)) == (1000, True)
    rest = storage.list_groups(conn, group_id, page_size=5000, page_token=biggest.next_page_token)
    assert ([g.group_id for g in rest.items], rest.next_page_token) == ([f"{group_id}01001"], "")


def test_list_groups_summaries(conn, group_id, topic):
    known, unknown, empty = f"{group_id}-a", f"{group_id}-b", f"{group_id}-c"
    first = storage.commit_offsets(conn, known, [OffsetCommit(topic, 0, 40), OffsetCommit(topic, 1, 90)])
    second = storage.commit_offsets(conn, unknown, [OffsetCommit(topic, 0, 40), OffsetCommit(topic, 2, 1)])
    storage.join_group(conn, empty)
    storage.report_watermarks(conn, [Watermark(topic, 0, 0, 100), Watermark(topic, 1, 0, 100)])

    summaries = storage.list_groups(conn, group_id).items
    assert [(g.group_id, g.generation, g.partition_count) for g in summaries] == [
        (known, 0, 2),
        (unknown, 0, 2),
        (empty, 1, 0),
    ]
    assert summaries[0].total_lag == 60 + 10
    assert summaries[1].total_lag == NO_OFFSET  # partition 2 has no log end
    assert [g.last_commit_time for g in summaries] == [first[0].commit_time, second[0].commit_time, None]


def test_list_groups_prefix_is_literal(conn, group_id):
    storage.join_group(conn, f"{group_id}%_x")
    storage.join_group(conn, f"{group_id}ab")
    assert [g.group_id for g in storage.list_groups(conn, f"{group_id}%").items] == [f"{group_id}%_x"]
    assert [g.group_id for g in storage.list_groups(conn, f"{group_id}_").items] == []


@pytest.mark.parametrize(
    "token", ["garbage!", "bm90IGpzb24", "MTIz", "dHJ1ZQ"], ids=["not-base64", "not-json", "a-number", "true"]
)
def test_list_groups_rejects_a_token_it_did_not_issue(conn, token):
    with pytest.raises(InvalidArgumentError) as caught:
        storage.list_groups(conn, page_token=token)
    assert violated_fields(caught.value) == ["page_token"]


def test_list_groups_rejects_a_negative_page_size(conn):
    with pytest.raises(InvalidArgumentError) as caught:
        storage.list_groups(conn, page_size=-1)
    assert violated_fields(caught.value) == ["page_size"]


def test_history_pages_newest_first(conn, group_id, topic):
    for offset in range(1, 8):
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, offset)])

    pages, token = [], ""
    while True:
        page = storage.list_offset_history(conn, group_id, page_size=3, page_token=token)
        pages.append([c.new_offset for c in page.items])
        token = page.next_page_token
        if not token:
            break
    assert pages == [[7, 6, 5], [4, 3, 2], [1]]


def test_history_page_token_of_an_exact_last_page(conn, group_id, topic):
    for offset in range(1, 7):
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, offset)])
    first = storage.list_offset_history(conn, group_id, page_size=3)
    second = storage.list_offset_history(conn, group_id, page_size=3, page_token=first.next_page_token)
    assert [c.new_offset for c in second.items] == [3, 2, 1]
    assert second.next_page_token == ""


def test_history_since_is_inclusive_and_until_exclusive(engine, group_id, topic):
    for offset in (1, 2, 3):
        committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, offset)])
    third, second, first = committed(engine, history, group_id)
    assert first.change_time < second.change_time < third.change_time

    with engine.connect() as conn:
        since = storage.list_offset_history(conn, group_id, since=second.change_time).items
        until = storage.list_offset_history(conn, group_id, until=second.change_time).items
        both = storage.list_offset_history(conn, group_id, since=second.change_time, until=third.change_time).items
    assert [c.new_offset for c in since] == [3, 2]
    assert [c.new_offset for c in until] == [1]
    assert [c.new_offset for c in both] == [2]


def test_history_filters_by_topic_selection(conn, group_id, topic):
    other = f"{topic}-other"
    storage.commit_offsets(
        conn, group_id, [OffsetCommit(topic, 0, 1), OffsetCommit(topic, 1, 1), OffsetCommit(other, 0, 1)]
    )
    by_partition = storage.list_offset_history(conn, group_id, {topic: (1,)}).items
    by_topic = storage.list_offset_history(conn, group_id, {other: ()}).items
    assert [(c.topic, c.partition) for c in by_partition] == [(topic, 1)]
    assert [(c.topic, c.partition) for c in by_topic] == [(other, 0)]


def test_history_rejects_a_group_token(conn, group_id):
    a_group_token = "ImEi"  # base64 of the JSON string "a", as list_groups issues them
    with pytest.raises(InvalidArgumentError) as caught:
        storage.list_offset_history(conn, group_id, page_token=a_group_token)
    assert violated_fields(caught.value) == ["page_token"]


def test_the_store_tables_hold_what_the_functions_wrote(conn, group_id, topic):
    # The schema is the contract with the Spark sink: check the rows themselves once.
    storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5, "m")], actor="me")
    row = conn.execute(sa.select(offsets).where(offsets.c.group_id == group_id)).one()
    assert (row.topic, row.partition, row.offset, row.metadata) == (topic, 0, 5, "m")
    entry = conn.execute(sa.select(offset_history).where(offset_history.c.group_id == group_id)).one()
    assert (entry.previous_offset, entry.new_offset, entry.kind, entry.actor) == (None, 5, int(ChangeKind.COMMIT), "me")


def test_to_commit_time_restores_a_deleted_group(engine, group_id, topic):
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 6)])
    instant = db_now(engine)
    committed(engine, storage.delete_offsets, group_id, all_topics=True)

    result = committed(engine, storage.reset_offsets, group_id, all_topics=True, to_commit_time=instant)

    # The delete moved the generation to 1; the re-created group continues above it.
    assert result.generation == 2
    assert committed(engine, stored, group_id) == {(topic, 0): 5, (topic, 1): 6}


def test_a_recreated_group_never_reuses_a_generation_of_the_deleted_one(engine, group_id, topic):
    old = committed(engine, storage.join_group, group_id)
    committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5)], generation=old)
    committed(engine, storage.delete_offsets, group_id, all_topics=True)

    new = committed(engine, storage.join_group, group_id)

    assert new > old
    with pytest.raises(StaleGenerationError):
        committed(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 6)], generation=old)
