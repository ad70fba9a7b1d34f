"""The rebalance helper against a real broker: stored offsets, sentinels and auto.offset.reset decide where reading starts."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from offsetstore.client import Boundary
from offsetstore.kafka_integration import StoredPositions, consumer_config
from tests.fixtures.fix_kafka import produce

pytestmark = pytest.mark.kafka


def first_offsets(consumer: Consumer, expect: set[int], *, quiet: float = 1.0, timeout: float = 30) -> dict[int, int]:
    """The first offset read from each partition: until every ``expect`` partition showed up, then ``quiet`` s more."""
    first: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    until = None
    while until is None or time.monotonic() < until:
        for m in consumer.consume(100, timeout=0.2):
            assert m.error() is None, m.error()
            first.setdefault(m.partition(), m.offset())
        if until is None and expect <= first.keys():
            until = time.monotonic() + quiet
        assert time.monotonic() < deadline, f"partitions {expect - first.keys()} read nothing in {timeout}s"
    return first


def new_consumer(broker, group_id: str, **extra) -> Consumer:
    return Consumer(consumer_config({"bootstrap.servers": broker.bootstrap, "group.id": group_id, **extra}))


@pytest.fixture
def sentinel_group(client, group_id, make_topic):
    """A 4-partition topic of 10 records each; stored: p0 = 5, p1 = -2 (earliest), p2 = -1 (latest), p3 none."""
    topic = make_topic(partitions=4, records=10)
    client.commit_offsets(group_id, {(topic.name, 0): 5, (topic.name, 1): 3, (topic.name, 2): 3})
    # A fresh topic has no reported watermarks, so the resets store the sentinels themselves.
    client.reset_offsets(group_id, topics={topic.name: [1]}, to_boundary=Boundary.EARLIEST)
    client.reset_offsets(group_id, topics={topic.name: [2]}, to_boundary=Boundary.LATEST)
    stored = {tp.partition: c.offset for tp, c in client.fetch_offsets(group_id, [topic.name]).offsets.items()}
    assert stored == {0: 5, 1: -2, 2: -1}
    return topic


@pytest.mark.parametrize("source", ["grpc", "database"])
def test_assign_seeks_to_stored_offsets_and_maps_sentinels(broker, client, engine, group_id, sentinel_group, source):
    topic = sentinel_group
    store = client if source == "grpc" else engine
    positions = StoredPositions(store, group_id, auto_offset_reset="earliest")
    consumer = new_consumer(broker, group_id)
    try:
        positions.assign(consumer, [(topic.name, p) for p in range(4)])
        # p2 (latest) reads nothing of what was there; p3 (none stored) starts at the beginning.
        assert first_offsets(consumer, {0, 1, 3}) == {0: 5, 1: 0, 3: 0}
        produce(broker.bootstrap, topic.name, 4, 11, start=10)
        assert first_offsets(consumer, {0, 1, 2, 3}) == {0: 10, 1: 10, 2: 10, 3: 10}
    finally:
        consumer.close()
    assert positions.stored == {(topic.name, 0): 5, (topic.name, 1): -2, (topic.name, 2): -1, (topic.name, 3): None}


def test_no_stored_offset_follows_auto_offset_reset_latest(broker, client, group_id, sentinel_group):
    topic = sentinel_group
    positions = StoredPositions(client, group_id, auto_offset_reset="latest")
    consumer = new_consumer(broker, group_id)
    try:
        positions.assign(consumer, [(topic.name, 3)])
        assert first_offsets(consumer, set(), quiet=1.5) == {}
        produce(broker.bootstrap, topic.name, 4, 11, start=10)
        assert first_offsets(consumer, {3}) == {3: 10}
    finally:
        consumer.close()


def test_kafka_commits_are_not_used(broker, client, group_id, make_topic):
    """A Kafka commit for the group is ignored: no stored offset means auto.offset.reset."""
    from confluent_kafka import TopicPartition as KafkaPartition

    topic = make_topic(partitions=1, records=10)
    committer = new_consumer(broker, group_id)
    try:
        committer.commit(offsets=[KafkaPartition(topic.name, 0, 7)], asynchronous=False)
        assert committer.committed([KafkaPartition(topic.name, 0)], timeout=10)[0].offset == 7
    finally:
        committer.close()
    consumer = new_consumer(broker, group_id)
    try:
        StoredPositions(client, group_id, auto_offset_reset="earliest").assign(consumer, [(topic.name, 0)])
        assert first_offsets(consumer, {0}) == {0: 0}
    finally:
        consumer.close()


def test_auto_offset_reset_error_raises_for_a_partition_without_offset(client, group_id):
    positions = StoredPositions(client, group_id, auto_offset_reset="error")
    with pytest.raises(LookupError, match=r"orders\[0\]"):
        positions.positions([("orders", 0)])
    client.commit_offsets(group_id, {("orders", 0): 4})
    assert positions.positions([("orders", 0)]) == {("orders", 0): 4}


def test_bad_options_are_refused(client):
    with pytest.raises(ValueError, match="auto_offset_reset"):
        StoredPositions(client, "g", auto_offset_reset="sometimes")
    with pytest.raises(ValueError, match="group_id"):
        StoredPositions(client, "")
    with pytest.raises(ValueError, match="enable.auto.commit"):
        consumer_config({"group.id": "g", "enable.auto.commit": True})
    assert consumer_config({"group.id": "g"}) == {
        "group.id": "g",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }


@pytest.mark.slow
def test_subscribe_on_assign_starts_at_stored_offsets(broker, client, group_id, make_topic):
    """The group protocol's assignment goes through on_assign to the stored offsets."""
    topic = make_topic(partitions=3, records=10)
    client.commit_offsets(group_id, {(topic.name, 0): 4, (topic.name, 1): 9})
    positions = StoredPositions(client, group_id, auto_offset_reset="earliest")
    consumer = new_consumer(broker, group_id, **{"session.timeout.ms": 10000})
    try:
        consumer.subscribe([topic.name], on_assign=positions.on_assign, on_revoke=positions.on_revoke)
        first = {}
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=0.2):
                first.setdefault(m.partition(), m.offset())
        first.update({p: o for p, o in first_offsets(consumer, {0, 1, 2} - first.keys()).items() if p not in first})
        assert first == {0: 4, 1: 9, 2: 0}
        assert sorted(p.partition for p in consumer.assignment()) == [0, 1, 2]
    finally:
        consumer.close()
