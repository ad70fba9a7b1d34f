"""The exactly-once writer on real messages from the broker and a real PostgreSQL: skip, commit, fence, refuse."""

from __future__ import annotations

import pyarrow as pa
import pytest

from offsetstore.client import StaleGenerationError
from offsetstore.kafka_integration import ExactlyOnceWriter
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_kafka import read_all, value

pytestmark = pytest.mark.kafka

COLUMNS = ("topic", "partition", "offset", "value", "run")


def rows_of(messages, run: int = 1) -> list[dict]:
    return [{"value": m.value().decode(), "run": run} for m in messages]


def test_write_commits_rows_and_offsets_and_skips_what_was_delivered(
    broker, database_url, engine, group_id, make_topic, make_table
):
    topic = make_topic(partitions=3, records=20)
    table = make_table()
    messages = read_all(broker, topic, expected=60)
    first = [m for m in messages if m.offset() < 12]
    with ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS) as writer:
        outcome = writer.write(first, rows_of(first))
        assert (outcome.rows, outcome.written, outcome.skipped) == (36, 36, 0)
        assert stored_offsets(engine, group_id) == {(topic.name, p): 12 for p in range(3)}
        # A redelivery overlapping what was written: only the new part lands.
        outcome = writer.write(messages, rows_of(messages))
        assert (outcome.rows, outcome.written, outcome.skipped) == (60, 24, 36)
    table.assert_exactly_once(topic.coordinates())
    assert all(r.value == value(r.partition, r.offset) for r in table.rows())
    assert stored_offsets(engine, group_id) == topic.at_end()


def test_a_newer_writer_fences_the_older_one(broker, database_url, engine, group_id, make_topic, make_table):
    topic = make_topic(partitions=1, records=10)
    table = make_table()
    messages = read_all(broker, topic, expected=10)
    old = ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS)
    new = ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS)
    try:
        assert old.join() < new.join()
        with pytest.raises(StaleGenerationError):
            old.write(messages[:5], rows_of(messages[:5]))
        assert table.coordinates() == [] and stored_offsets(engine, group_id) == {}
        new.write(messages, rows_of(messages, run=2))
    finally:
        old.close()
        new.close()
    table.assert_exactly_once(topic.coordinates())
    assert {r.run for r in table.rows()} == {2}


def test_upsert_and_the_callers_transaction(broker, database_url, engine, group_id, make_topic, make_table):
    topic = make_topic(partitions=1, records=6)
    table = make_table(', UNIQUE ("partition")')
    messages = read_all(broker, topic, expected=6)
    writer = ExactlyOnceWriter(
        database_url, group_id, table.name, mode="upsert", key_columns=("partition",), columns=COLUMNS
    )
    try:
        with writer.engine.connect() as conn:
            transaction = conn.begin()
            writer.write(messages[:3], rows_of(messages[:3]), conn=conn)
            transaction.rollback()  # the caller's rollback takes the rows and the offsets with it
            assert table.coordinates() == [] and stored_offsets(engine, group_id) == {}
        writer.write(messages, pa.table({"value": [m.value().decode() for m in messages], "run": [7] * 6}))
    finally:
        writer.close()
    assert [(r.offset, r.value, r.run) for r in table.rows()] == [(5, value(0, 5), 7)]
    assert stored_offsets(engine, group_id) == {(topic.name, 0): 6}


def test_bad_input_is_refused_and_nothing_is_written(broker, database_url, engine, group_id, make_topic, make_table):
    topic = make_topic(partitions=1, records=3)
    table = make_table()
    messages = read_all(broker, topic, expected=3)
    with ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS) as writer:
        with pytest.raises(ValueError, match="2 rows for 3 messages"):
            writer.write(messages, rows_of(messages[:2]))
        with pytest.raises(ValueError, match="come from the messages"):
            writer.write(messages, [{"offset": 1, "value": "x", "run": 1}] * 3)
        with pytest.raises(ValueError, match="columns"):
            writer.write(messages, [{"run": 1}] * 3)  # no value column
        assert writer.write([], []) is None
    assert table.coordinates() == [] and stored_offsets(engine, group_id) == {}
    with pytest.raises(ValueError, match="upsert"):
        ExactlyOnceWriter(database_url, group_id, table.name, mode="upsert")
    with pytest.raises(ValueError, match="group_id"):
        ExactlyOnceWriter(database_url, "", table.name)
    with pytest.raises(TypeError, match="not a string"):
        ExactlyOnceWriter(database_url, group_id, table.name, mode="upsert", key_columns="value")
