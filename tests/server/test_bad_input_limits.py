"""Bad input's other side: the largest valid values are accepted, crafted values that pass the checks still
never reach the database as an error, and hostile strings are plain data."""

from __future__ import annotations

import time

import grpc
import pytest
import sqlalchemy as sa

from offsetstore.client import (
    OffsetCommit,
    TopicPartition,
    Watermark,
)
from offsetstore.server.limits import Limits
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.bad_input import (
    INT64_MAX,
    MAX_PARTITIONS,
    assert_clean_message,
    assert_invalid_argument,
    commit,
    failure,
    oc,
    padded,
    token_of,
)

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
    # The client's own deadline: late in the suite this description once passed 20 s. The statistics
    # had not seen the 10,000 watermarks just reported, and the planner scanned the watermarks once
    # per offset row (10,000 x 10,000); each partition's watermark is now one index probe
    # (storage/lag_columns.py, WATERMARK; tests/storage/test_read_plans.py counts the rows).
    started = time.monotonic()
    partitions = client.describe_group(full_group).partitions
    print(f"\nDescribeGroup of {MAX_PARTITIONS:,} partitions with watermarks: {time.monotonic() - started:.1f} s")
    assert {p.lag for p in partitions} == {10}


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


# Alone: the call after the server's connections are killed reconnects within the 300 ms statement
# timeout, which a neighbour's load on two cores can break (UNAVAILABLE, as it should be then).
@pytest.mark.alone
def test_errors_from_database_failures_carry_no_database_text(database_url, engine, group_id, topic):
    # Real database failures, each answered STORE_UNAVAILABLE without what the database said.
    from offsetstore.runtime.config import StoreConfig
    from offsetstore.runtime.store import Store
    from offsetstore.storage.engine import SessionSettings
    from tests.fixtures.fix_server import ServerHandle

    name = f"offsetstore-failing-{group_id}"
    store = Store.open(
        StoreConfig(database_url, SessionSettings(statement_timeout_ms=300, application_name=name), hot_pool_size=2)
    )
    failures = []
    try:
        with ServerHandle(store, "127.0.0.1:0", limits=Limits(max_workers=4)) as server:
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
    finally:
        store.dispose()  # also when it fails: a store left open is destroyed in a later test

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
