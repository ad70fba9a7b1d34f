"""The Kafka mirror on the local broker: offsets committed to the store show in Kafka's group coordinator."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import CommittedOffset, OffsetCommit
from offsetstore.kafka_integration import ExactlyOnceWriter, consumer_config
from offsetstore.server.kafka_mirror import KafkaMirror
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_server import ServerHandle, free_port

pytestmark = pytest.mark.kafka


def kafka_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    """The group's committed offsets as Kafka's coordinator has them (AdminClient.list_consumer_group_offsets)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [KafkaPartition(topic, p) for p in range(partitions)])
    (future,) = admin.list_consumer_group_offsets([request], request_timeout=10).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(timeout=15).topic_partitions if tp.offset >= 0}


COLUMNS = ("topic", "partition", "offset", "value")


def consume_all(consumer: Consumer, topic, expected: int, timeout: float = 30) -> list:
    """The topic's messages from its start, read by ``consumer`` (assigned, not subscribed: no live member)."""
    consumer.assign([KafkaPartition(topic.name, p, -2) for p in range(topic.partitions)])
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        out.extend(m for m in consumer.consume(500, timeout=0.2) if m.error() is None)
    assert len(out) == expected, f"read {len(out)} of {expected} messages"
    return out


def failures(mirror: KafkaMirror) -> float:
    return mirror.registry.get_sample_value("offsetstore_kafka_mirror_failures_total") or 0


def eventually(read: Callable[[], object], expected: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"{found!r} != {expected!r}"
        time.sleep(0.2)


@pytest.fixture
def mirrored_server(broker, store) -> Iterator[tuple[ServerHandle, KafkaMirror, OffsetStoreClient]]:
    mirror = KafkaMirror(broker.bootstrap, ["mirror-"], 0.2, registry=CollectorRegistry(), request_seconds=5).start()
    server = ServerHandle(store, "127.0.0.1:0", kafka_mirror=mirror).start()
    client = OffsetStoreClient(server.address)
    try:
        yield server, mirror, client
    finally:
        client.close()
        server.stop()
        mirror.stop()


def test_the_writer_mirrors_its_commits_through_the_consumer(broker, database_url, engine, make_topic, make_table):
    topic = make_topic(partitions=2, records=10)
    table = make_table()
    group = f"writer-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(consumer_config({"bootstrap.servers": broker.bootstrap, "group.id": group}))
    try:
        messages = consume_all(consumer, topic, expected=20)
        with ExactlyOnceWriter(database_url, group, table.name, columns=COLUMNS, mirror_to_kafka=consumer) as writer:
            first = [m for m in messages if m.offset() < 4]
            writer.write(first, [{"value": m.value().decode()} for m in first])
            eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 2), stored_offsets(engine, group))
            writer.write(messages, [{"value": m.value().decode()} for m in messages])
        assert stored_offsets(engine, group) == topic.at_end()
        eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 2), topic.at_end())
        # What the consumer itself reads back as its group's committed offsets.
        committed = consumer.committed([KafkaPartition(topic.name, p) for p in range(2)], timeout=10)
        assert {(tp.topic, tp.partition): tp.offset for tp in committed} == topic.at_end()
    finally:
        consumer.close()


def kafka_describe(broker, group: str) -> set[tuple[str, ...]]:
    """(topic, partition, current offset, log end, lag) rows of Kafka's own ``kafka-consumer-groups --describe``."""
    out = broker.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    return {tuple(line.split()[1:6]) for line in out.stdout.splitlines() if line.startswith(group)}


def test_kafkas_own_group_command_shows_the_stores_offsets_and_lag(broker, engine, make_topic, mirrored_server):
    """An operator's kafka-consumer-groups --describe reads the mirrored group: the store's offsets, lag by Kafka."""
    _, mirror, client = mirrored_server
    topic = make_topic(partitions=3, records=10)
    group = f"mirror-{uuid.uuid4().hex[:8]}"
    client.commit_offsets(group, [OffsetCommit(topic.name, 0, 4), OffsetCommit(topic.name, 1, 10)])
    client.commit_offsets(group, [OffsetCommit(topic.name, 2, 7)])
    eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 3), stored_offsets(engine, group))
    assert kafka_describe(broker, group) == {
        (topic.name, "0", "4", "10", "6"),
        (topic.name, "1", "10", "10", "0"),
        (topic.name, "2", "7", "10", "3"),
    }
    # A reset in the store (an operator's, or a reprocessing) reaches Kafka's view too.
    client.commit_offsets(group, [OffsetCommit(topic.name, 1, 2)])
    eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 3)[(topic.name, 1)], 2)
    assert (topic.name, "1", "2", "10", "8") in kafka_describe(broker, group)
    assert failures(mirror) == 0


def test_the_server_mirrors_matching_groups(broker, engine, make_topic, mirrored_server):
    _, mirror, client = mirrored_server
    topic = make_topic(partitions=3)
    group, other = f"mirror-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    client.commit_offsets(group, [OffsetCommit(topic.name, p, 10 + p) for p in range(3)])
    client.commit_offsets(group, [OffsetCommit(topic.name, 0, 42)])
    client.commit_offsets(other, [OffsetCommit(topic.name, 0, 7)])
    eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 3), stored_offsets(engine, group))
    assert stored_offsets(engine, group) == {(topic.name, 0): 42, (topic.name, 1): 11, (topic.name, 2): 12}
    assert kafka_offsets(broker.bootstrap, other, topic.name, 3) == {}  # not a mirrored prefix
    assert failures(mirror) == 0


@pytest.mark.slow
def test_a_group_with_live_kafka_members_is_refused_and_counted(broker, make_topic, mirrored_server):
    _, mirror, client = mirrored_server
    topic = make_topic(partitions=1)
    group = f"mirror-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": broker.bootstrap, "group.id": group, "session.timeout.ms": 10000}
    member = Consumer(consumer_config(config))
    try:
        member.subscribe([topic.name])
        deadline = time.monotonic() + 30
        while not member.assignment():  # a live member of the group
            assert time.monotonic() < deadline, "the consumer never joined"
            member.consume(100, timeout=0.2)
        client.commit_offsets(group, [OffsetCommit(topic.name, 0, 5)])  # the store takes it regardless
        deadline = time.monotonic() + 20
        while not (refused := failures(mirror) >= 1) and not kafka_offsets(broker.bootstrap, group, topic.name, 1):
            assert time.monotonic() < deadline, "the mirror neither wrote nor failed"
            member.poll(0.2)  # stays a live member meanwhile
        print(f"group with a live member: {'refused' if refused else 'accepted'} by the broker")
        assert refused
        assert kafka_offsets(broker.bootstrap, group, topic.name, 1) == {}
    finally:
        member.close()


def test_a_broker_that_is_down_neither_fails_nor_slows_commits(store, engine, group_id):
    mirror = KafkaMirror(
        f"127.0.0.1:{free_port()}", ["g-"], 0.2, registry=CollectorRegistry(), request_seconds=2
    ).start()
    server = ServerHandle(store, "127.0.0.1:0", kafka_mirror=mirror).start()
    client = OffsetStoreClient(server.address)
    try:
        started = time.monotonic()
        for i in range(50):
            client.commit_offsets(group_id, [OffsetCommit("down", 0, i)])
        assert time.monotonic() - started < 5  # each commit as fast as ever: nothing waits for Kafka
        assert stored_offsets(engine, group_id) == {("down", 0): 49}
        eventually(lambda: failures(mirror) >= 1, True)
    finally:
        client.close()
        server.stop()
        mirror.stop()


def test_one_tenants_flood_of_commits_drops_no_other_tenants_offsets(broker, make_topic):
    # A long interval, as --mirror-interval 15s: every commit of the flood is offered before a round runs.
    mirror = KafkaMirror(broker.bootstrap, ["mirror-"], 3600, registry=CollectorRegistry(), request_seconds=5).start()
    topic = make_topic(partitions=2)
    flooder, victim = f"mirror-flood-{uuid.uuid4().hex[:8]}", f"mirror-victim-{uuid.uuid4().hex[:8]}"
    try:
        for offset in range(20_000):  # twice what the queue of commits held
            mirror.offer(flooder, [CommittedOffset(topic.name, 0, offset, "", None)])
        mirror.offer(victim, [CommittedOffset(topic.name, 1, 7, "", None)])
    finally:
        mirror.stop()  # one last round: what is pending goes to Kafka
    dropped = mirror.registry.get_sample_value("offsetstore_kafka_mirror_dropped_commits_total")
    print(
        f"flood of 20,000 commits: {dropped:.0f} commits dropped; victim mirrored: {kafka_offsets(broker.bootstrap, victim, topic.name, 2)}"
    )
    assert kafka_offsets(broker.bootstrap, victim, topic.name, 2) == {(topic.name, 1): 7}
    assert kafka_offsets(broker.bootstrap, flooder, topic.name, 2) == {(topic.name, 0): 19_999}
    assert dropped == 0
