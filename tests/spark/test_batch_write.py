"""The shared exactly-once batch core (offsetstore.sink.batch_write) on real PostgreSQL, without Spark."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.client import Boundary, OffsetCommit, StaleGenerationError, TopicPartition
from offsetstore.sink.batch_write import PartitionStats, SinkTarget, TableName, deliver_batch
from tests.fixtures.fix_db import stored_offsets


@pytest.fixture
def table(engine: sa.Engine):
    name = TableName("public", f"bw_{uuid.uuid4().hex[:10]}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE {name.regclass()} (id text PRIMARY KEY, v integer, topic text, "partition" integer, '
            '"offset" bigint)'
        )
    yield name
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {name.regclass()}")


def rows(topic: str, partition: int, offsets: range, *, key=lambda o: f"k{o}") -> pa.Table:
    return pa.table(
        {
            "id": [key(o) for o in offsets],
            "v": pa.array(list(offsets), pa.int32()),
            "topic": [topic] * len(offsets),
            "partition": pa.array([partition] * len(offsets), pa.int32()),
            "offset": pa.array(list(offsets), pa.int64()),
        }
    )


def contents(engine: sa.Engine, name: TableName) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f'SELECT id, v, "offset" FROM {name.regclass()} ORDER BY v')]


def test_a_replay_writes_only_the_new_rows_and_commits_each_partition_once(engine, table, group_id):
    target = SinkTarget(table)
    with engine.begin() as conn:
        first = deliver_batch(conn, target, rows("t", 0, range(0, 10)), group_id=group_id, generation=0, actor="a")
    # A replay from offset 5 that also brings 10..14: 5 skipped, 5 written, streamed as batches.
    replay = rows("t", 0, range(5, 15)).to_batches(max_chunksize=3)
    with engine.begin() as conn:
        second = deliver_batch(conn, target, iter(replay), group_id=group_id, generation=0, actor="a", metadata="m")

    assert (first.rows, first.written, first.skipped) == (10, 10, 0)
    assert first.committed == {TopicPartition("t", 0): 10}
    assert (second.rows, second.written, second.skipped) == (10, 5, 5)
    assert second.partitions == {TopicPartition("t", 0): PartitionStats(5, 14, 10)}
    assert second.committed == {TopicPartition("t", 0): 15}
    assert [r[2] for r in contents(engine, table)] == list(range(15))
    assert stored_offsets(engine, group_id) == {("t", 0): 15}


def test_an_upsert_keeps_the_newest_row_of_a_key(engine, table, group_id):
    target = SinkTarget(table, mode="upsert", key_columns=("id",), columns=("id", "v", "offset"))
    with engine.begin() as conn:
        deliver_batch(conn, target, rows("t", 1, range(0, 6), key=lambda o: f"k{o % 2}"), group_id=group_id,
                    generation=0, actor="a")  # fmt: skip
        # A second batch in the same transaction: the batch table must not be in the way.
        deliver_batch(conn, target, rows("t", 1, range(6, 7), key=lambda o: "k0"), group_id=group_id,
                    generation=0, actor="a")  # fmt: skip
    assert contents(engine, table) == [("k1", 5, 5), ("k0", 6, 6)]
    assert stored_offsets(engine, group_id) == {("t", 1): 7}


def test_a_stale_generation_writes_nothing(engine, table, group_id):
    with engine.begin() as conn:
        old = storage.join_group(conn, group_id, "a")
        storage.join_group(conn, group_id, "b")
    with pytest.raises(StaleGenerationError), engine.begin() as conn:
        deliver_batch(conn, SinkTarget(table), rows("t", 0, range(3)), group_id=group_id, generation=old, actor="a")
    assert contents(engine, table) == [] and stored_offsets(engine, group_id) == {}


def test_a_stored_sentinel_skips_nothing_and_offsets_never_go_backwards(engine, table, group_id, topic):
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 100), OffsetCommit(topic, 1, 50)])
        # No watermark is known for the fresh topic: earliest is stored as the sentinel -2.
        storage.reset_offsets(conn, group_id, {topic: [1]}, to_boundary=Boundary.EARLIEST)
    assert stored_offsets(engine, group_id) == {(topic, 0): 100, (topic, 1): -2}
    batch = pa.concat_tables([rows(topic, 0, range(0, 3)), rows(topic, 1, range(3, 6))])
    with engine.begin() as conn:
        outcome = deliver_batch(conn, SinkTarget(table), batch, group_id=group_id, generation=0, actor="a")
    assert (outcome.written, outcome.skipped) == (3, 3)
    assert outcome.committed == {TopicPartition(topic, 1): 6}
    assert [r[2] for r in contents(engine, table)] == [3, 4, 5]
    assert stored_offsets(engine, group_id) == {(topic, 0): 100, (topic, 1): 6}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"id": ["a"], "topic": ["t"], "partition": pa.array([0], pa.int32())}), "no offset column"),
        (
            pa.table({"id": ["a"], "topic": ["t"], "partition": pa.array([0], pa.int32()), "offset": [None]}),
            "offset column holds nulls",
        ),
    ],
)
def test_bad_rows_are_refused_and_nothing_is_written(engine, table, group_id, data, message):
    with pytest.raises(ValueError, match=message), engine.begin() as conn:
        deliver_batch(
            conn, SinkTarget(table, columns=("id", "offset")), data, group_id=group_id, generation=0, actor=""
        )
    assert contents(engine, table) == [] and stored_offsets(engine, group_id) == {}
