"""Issue 58: a group bound to its Kafka cluster, the fingerprint of the record before an offset, and a switch."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.errors import ClusterMismatchError, StaleGenerationError
from offsetstore.core.types import ChangeKind, OffsetCommit, RecordFingerprint, TopicPartition
from offsetstore.storage.clusters import bind_cluster, bound_cluster, read_fingerprints, write_fingerprints


def describe(engine: sa.Engine, group_id: str):
    with engine.connect() as conn:
        return storage.describe_group(conn, group_id)


def test_first_writer_binds_the_group_and_a_writer_of_another_cluster_is_refused(engine, group_id, topic) -> None:
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5)])  # an older group: bound to none
    assert describe(engine, group_id).kafka_cluster_id == ""
    with engine.begin() as conn:
        storage.join_group(conn, group_id)
        bind_cluster(conn, group_id, "cluster-A")
    with engine.begin() as conn:
        bind_cluster(conn, group_id, "cluster-A")  # the same cluster: fine
    with pytest.raises(ClusterMismatchError) as refused, engine.begin() as conn:
        bind_cluster(conn, group_id, "cluster-B")
    assert refused.value.metadata == {"group_id": group_id, "bound_cluster_id": "cluster-A", "cluster_id": "cluster-B"}
    assert "'cluster-A'" in refused.value.message and "'cluster-B'" in refused.value.message
    assert describe(engine, group_id).kafka_cluster_id == "cluster-A"


def test_a_fingerprint_shows_while_it_is_of_the_stored_offset(engine, group_id, topic) -> None:
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with engine.begin() as conn:
        storage.join_group(conn, group_id)
        bind_cluster(conn, group_id, "cluster-A")
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 10), OffsetCommit(topic, 1, 7)])
        write_fingerprints(
            conn,
            group_id,
            {tp0: RecordFingerprint(10, 1_700_000_000_123, b"d" * 16), tp1: RecordFingerprint(6, 1, b"x")},
        )
    found = {(p.topic, p.partition): p.fingerprint for p in describe(engine, group_id).partitions}
    assert found == {(topic, 0): RecordFingerprint(10, 1_700_000_000_123, b"d" * 16), (topic, 1): None}


def test_a_switch_rebinds_fences_records_both_ids_and_is_undone_from_history(engine, group_id, topic) -> None:
    tp = TopicPartition(topic, 0)
    with engine.begin() as conn:
        generation = storage.join_group(conn, group_id)
        bind_cluster(conn, group_id, "cluster-A")
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 100)], generation=generation)
        before = conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one()
    with engine.begin() as conn:
        preview = storage.reset_offsets(
            conn, group_id, {topic: [0]}, to_offsets={tp: 80}, dry_run=True, switch_to_cluster_id="cluster-B"
        )
    assert preview.dry_run and [c.kind for c in preview.changes] == [ChangeKind.SWITCH]
    assert describe(engine, group_id).kafka_cluster_id == "cluster-A"  # a dry run binds nothing
    with engine.begin() as conn:
        done = storage.reset_offsets(
            conn,
            group_id,
            {topic: [0]},
            to_offsets={tp: 80},
            switch_to_cluster_id="cluster-B",
            expected_generation=preview.generation,
            source="exact",
        )
    assert done.generation == generation + 1
    (change,) = done.changes
    assert (change.previous_offset, change.new_offset, change.kind) == (100, 80, ChangeKind.SWITCH)
    assert change.source == "switch from cluster cluster-A to cluster-B: exact"
    with engine.connect() as conn:
        assert bound_cluster(conn, group_id) == "cluster-B"
        history = storage.list_offset_history(conn, group_id).items
    assert history[0].kind == ChangeKind.SWITCH and history[0].source == change.source
    with pytest.raises(ClusterMismatchError), engine.begin() as conn:
        bind_cluster(conn, group_id, "cluster-A")  # the old cluster's writer, after the switch
    # Undone from the history: the offset of before the switch, and bound back to A.
    with engine.begin() as conn:
        back = storage.reset_offsets(
            conn, group_id, {topic: [0]}, to_commit_time=before, switch_to_cluster_id="cluster-A"
        )
    assert [c.new_offset for c in back.changes] == [100]
    assert back.changes[0].source == "switch from cluster cluster-B to cluster-A"
    assert describe(engine, group_id).kafka_cluster_id == "cluster-A"


def test_join_group_binds_and_a_refused_join_rolls_back_with_its_transaction(engine, group_id, topic) -> None:
    with engine.begin() as conn:
        generation = storage.join_group(conn, group_id, "m", kafka_cluster_id="cluster-A")
    with pytest.raises(ClusterMismatchError), engine.begin() as conn:
        storage.join_group(conn, group_id, "m", kafka_cluster_id="cluster-B")
    with engine.connect() as conn:
        assert storage.group_generation(conn, group_id) == generation
        assert bound_cluster(conn, group_id) == "cluster-A"


def test_commit_offsets_writes_fingerprints_in_its_transaction_and_none_when_refused(engine, group_id, topic) -> None:
    tp = TopicPartition(topic, 0)
    with engine.begin() as conn:
        generation = storage.join_group(conn, group_id, kafka_cluster_id="cluster-A")
        storage.commit_offsets(
            conn,
            group_id,
            [OffsetCommit(topic, 0, 10)],
            generation=generation,
            fingerprints=[(tp, RecordFingerprint(10, 5, b"a" * 16))],
        )
    with pytest.raises(RuntimeError), engine.begin() as conn:  # the caller's transaction fails later
        storage.commit_offsets(
            conn, group_id, [OffsetCommit(topic, 0, 11)], fingerprints=[(tp, RecordFingerprint(11, 6, b"b" * 16))]
        )
        raise RuntimeError("rolled back")
    with pytest.raises(StaleGenerationError), engine.begin() as conn:
        storage.commit_offsets(
            conn,
            group_id,
            [OffsetCommit(topic, 0, 12)],
            generation=generation + 1,
            fingerprints=[(tp, RecordFingerprint(12, 7, b"c" * 16))],
        )
    with engine.connect() as conn:
        assert read_fingerprints(conn, group_id) == {tp: RecordFingerprint(10, 5, b"a" * 16)}
    assert [p.fingerprint for p in describe(engine, group_id).partitions] == [RecordFingerprint(10, 5, b"a" * 16)]


def test_one_batch_of_two_commits_of_a_partition_keeps_the_later_ones_fingerprint(engine, group_id, topic) -> None:
    """Group commit puts concurrent commits of a group in one statement: the later one wins, offset and fingerprint."""
    tp = TopicPartition(topic, 0)
    requests = [
        storage.CommitRequest(
            group_id, [OffsetCommit(topic, 0, n)], fingerprints=[(tp, RecordFingerprint(n, n, bytes([n]) * 16))]
        )
        for n in (3, 5, 4)
    ]
    with engine.begin() as conn:
        storage.join_group(conn, group_id, kafka_cluster_id="cluster-A")
        outcomes = storage.write_batch(conn, requests)
    assert [o[0].offset for o in outcomes] == [3, 5, 4]
    assert [p.fingerprint for p in describe(engine, group_id).partitions] == [RecordFingerprint(4, 4, b"\x04" * 16)]


def test_a_deleted_group_is_unbound_and_a_deleted_partition_loses_its_fingerprint(engine, group_id, topic) -> None:
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with engine.begin() as conn:
        storage.join_group(conn, group_id)
        bind_cluster(conn, group_id, "cluster-A")
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 10), OffsetCommit(topic, 1, 7)])
        write_fingerprints(
            conn, group_id, {tp0: RecordFingerprint(10, 1, b"a" * 16), tp1: RecordFingerprint(7, 2, b"b" * 16)}
        )
    with engine.begin() as conn:
        storage.delete_offsets(conn, group_id, {topic: [1]})
    with engine.connect() as conn:
        assert set(read_fingerprints(conn, group_id)) == {tp0}  # the deleted partition's went with its offset
        assert bound_cluster(conn, group_id) == "cluster-A"  # a partial delete keeps the binding
    with engine.begin() as conn:
        storage.delete_offsets(conn, group_id, all_topics=True)
    with engine.connect() as conn:
        assert read_fingerprints(conn, group_id) == {}
        assert bound_cluster(conn, group_id) is None
    with engine.begin() as conn:  # the id is free: a consumer of another cluster may use it
        storage.join_group(conn, group_id)
        bind_cluster(conn, group_id, "cluster-B")
    assert describe(engine, group_id).kafka_cluster_id == "cluster-B"
