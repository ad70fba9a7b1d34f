"""The at-least-once committer over the gRPC service, and watermarks from the consumer feeding lag."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from offsetstore.client import OffsetMismatchError, StaleGenerationError
from offsetstore.kafka_integration import (
    AtLeastOnceCommitter,
    ExactlyOnceWriter,
    StoredPositions,
    WatermarkReporter,
    consumer_config,
    consumer_watermarks,
)
from tests.fixtures.fix_kafka import produce, read_all

pytestmark = pytest.mark.kafka


def test_commit_after_processing_stores_next_offsets(broker, client, group_id, make_topic):
    topic = make_topic(partitions=2, records=5)
    messages = read_all(broker, topic, expected=10)
    committer = AtLeastOnceCommitter(client, group_id)
    committed = committer.commit([m for m in messages if m.offset() < 3])
    assert {tp: c.offset for tp, c in committed.items()} == {(topic.name, 0): 3, (topic.name, 1): 3}
    committer.commit(messages, metadata="done")
    fetched = client.fetch_offsets(group_id).offsets
    assert {tp: (c.offset, c.metadata) for tp, c in fetched.items()} == {
        (topic.name, 0): (5, "done"),
        (topic.name, 1): (5, "done"),
    }
    assert client.fetch_offsets(group_id).generation == committer.generation == 1


def test_a_newer_consumer_or_a_reset_fences_the_committer(broker, client, group_id, make_topic):
    topic = make_topic(partitions=1, records=4)
    messages = read_all(broker, topic, expected=4)
    first = AtLeastOnceCommitter(client, group_id)
    first.commit(messages[:1])
    second = AtLeastOnceCommitter(client, group_id)
    second.join()
    with pytest.raises(StaleGenerationError):
        first.commit(messages[:2])
    second.commit(messages[:2])
    client.reset_offsets(group_id, topics=[topic.name], to_offset=0)
    with pytest.raises(StaleGenerationError):
        second.commit(messages)
    assert client.fetch_offsets(group_id).offsets[(topic.name, 0)].offset == 0
    # Unfenced commits ignore generations altogether.
    AtLeastOnceCommitter(client, group_id, fenced=False).commit(messages)
    assert client.fetch_offsets(group_id).offsets[(topic.name, 0)].offset == 4


def test_compare_and_set_refuses_a_commit_over_an_offset_that_moved(broker, client, group_id, make_topic):
    topic = make_topic(partitions=1, records=6)
    client.commit_offsets(group_id, {(topic.name, 0): 2})
    consumer = Consumer(consumer_config({"bootstrap.servers": broker.bootstrap, "group.id": group_id}))
    try:
        positions = StoredPositions(client, group_id)
        positions.assign(consumer, [(topic.name, 0)])
        messages = []
        while len(messages) < 4:
            messages.extend(m for m in consumer.consume(10, timeout=0.5) if m.error() is None)
    finally:
        consumer.close()
    assert [m.offset() for m in messages] == [2, 3, 4, 5]
    committer = AtLeastOnceCommitter(client, group_id, compare_and_set=True, positions=positions, fenced=False)
    committer.commit(messages[:2])  # expects 2, the offset read on assignment
    client.commit_offsets(group_id, {(topic.name, 0): 1})  # someone else moves it
    with pytest.raises(OffsetMismatchError):
        committer.commit(messages)
    assert client.fetch_offsets(group_id).offsets[(topic.name, 0)].offset == 1


def test_watermarks_from_the_consumer_feed_describe_group_lag(broker, client, group_id, make_topic):
    topic = make_topic(partitions=2, records=8)
    client.commit_offsets(group_id, {(topic.name, 0): 3, (topic.name, 1): 8})
    consumer = Consumer(consumer_config({"bootstrap.servers": broker.bootstrap, "group.id": group_id}))
    try:
        StoredPositions(client, group_id).assign(consumer, [(topic.name, 0), (topic.name, 1)])
        marks = WatermarkReporter(consumer, client, interval=60).maybe_report()
        assert [(w.partition, w.log_start_offset, w.log_end_offset) for w in marks] == [(0, 0, 8), (1, 0, 8)]
        status = {p.partition: (p.log_end_offset, p.lag) for p in client.describe_group(group_id).partitions}
        assert status == {0: (8, 5), 1: (8, 0)}
        produce(broker.bootstrap, topic.name, 2, 10, start=8)
        # Once the consumer fetched the new records, its watermarks say so.
        seen = set()
        deadline = time.monotonic() + 20
        while (1, 9) not in seen and time.monotonic() < deadline:
            seen.update((m.partition(), m.offset()) for m in consumer.consume(100, timeout=0.2) if m.error() is None)
        assert consumer_watermarks(consumer, [(topic.name, 1)])[0].log_end_offset == 10
    finally:
        consumer.close()


def test_the_writer_reports_watermarks_into_its_database(broker, database_url, client, group_id, make_topic):
    topic = make_topic(partitions=1, records=5)
    client.commit_offsets(group_id, {(topic.name, 0): 1})
    consumer = Consumer(consumer_config({"bootstrap.servers": broker.bootstrap, "group.id": group_id}))
    writer = ExactlyOnceWriter(database_url, group_id, "unused_table")
    try:
        StoredPositions(writer.engine, group_id).assign(consumer, [(topic.name, 0)])
        WatermarkReporter(consumer, writer).report()
    finally:
        consumer.close()
        writer.close()
    [status] = client.describe_group(group_id).partitions
    assert (status.log_end_offset, status.lag) == (5, 4)
