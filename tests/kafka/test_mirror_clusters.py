"""The Kafka mirror and a group's Kafka cluster (issue 58): a mirror writes only the groups bound to its own cluster
(or to none), and a group switched to it, at its translated offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from offsetstore.kafka_integration import ExactlyOnceWriter, consumer_config
from offsetstore.kafka_integration.local_kafka import KafkaCluster, producer_config
from offsetstore.server.kafka_mirror import KafkaMirror
from tests.fixtures.fix_apache_kafka import _start
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_kafka import Topic, value
from tests.fixtures.kafka_mirror import (
    COLUMNS,
    commit,
    consume_all,
    failures,
    kafka_describe,
    kafka_offsets,
    new_mirror,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def cluster_b() -> Iterator[KafkaCluster]:
    """A second Apache Kafka cluster (one KRaft broker) for the module; the session's ``broker`` is cluster A."""
    cluster = _start(KafkaCluster(1, heap="256m"))
    try:
        yield cluster
    finally:
        cluster.stop()


def produce_same(clusters: list[tuple[KafkaCluster, int]], topic: str, partitions: int, records: int) -> None:
    """The same records (key, value, timestamp) into ``topic`` on each cluster, after ``n`` older ones of its own there."""
    from confluent_kafka import Producer

    start = int(time.time() * 1000) - 60_000
    for cluster, before in clusters:
        cluster.create_topic(topic, partitions)
        producer = Producer(producer_config(cluster.bootstrap))
        for p in range(partitions):
            for i in range(before):  # B's own older records: the same record sits at another offset there
                producer.produce(topic, value=f"b-only-{i}".encode(), partition=p, timestamp=start - 1000)
            for i in range(records):
                producer.produce(topic, key=b"k", value=value(p, i).encode(), partition=p, timestamp=start + i)
        assert producer.flush(30) == 0


def skipped(mirror: KafkaMirror) -> float:
    return mirror.registry.get_sample_value("offsetstore_kafka_mirror_skipped_groups_total") or 0


def cluster_id(cluster: KafkaCluster) -> str:
    admin = AdminClient(cluster.client_config())
    found: str = admin.describe_cluster(request_timeout=10).result(timeout=15).cluster_id
    return found


def test_the_mirror_follows_each_groups_cluster_and_a_switch_to_its_own(
    broker, cluster_b, store, engine, database_url, make_table, groups
):
    """A mirror pointed at B writes the groups bound to B or to none, never one bound to A (whose offsets mean nothing
    on B); after ``groups switch --all-groups`` to B, B's coordinator shows that group at its translated offsets."""
    a, b = broker, cluster_b
    topic = f"t-{uuid.uuid4().hex[:10]}"
    produce_same([(a, 0), (b, 3)], topic, partitions=2, records=10)  # B's offset of a record: A's + 3
    prefix = f"mirror-{uuid.uuid4().hex[:8]}-"
    on_a, unbound = f"{prefix}on-a", f"{prefix}unbound"
    table = make_table()
    consumer = Consumer(consumer_config({"bootstrap.servers": a.bootstrap, "group.id": on_a}))
    try:
        messages = [
            m for m in consume_all(consumer, Topic(topic, 2, 10), expected=20) if m.offset() < 4 + m.partition()
        ]
        # The Kafka recipe on A: binds the group to A, fingerprints the record before each offset.
        with ExactlyOnceWriter(database_url, on_a, table.name, columns=COLUMNS, consumer=consumer) as writer:
            writer.write(messages, [{"value": m.value().decode()} for m in messages])
    finally:
        consumer.close()
    assert stored_offsets(engine, on_a) == {(topic, 0): 4, (topic, 1): 5}
    commit(engine, unbound, {(topic, 0): 2, (topic, 1): 2})
    a_id = groups("describe", on_a, "--output", "json").json()["kafka_cluster_id"]
    assert a_id == cluster_id(a) != cluster_id(b)

    mirror = new_mirror(store, b.bootstrap, [prefix]).start_client()  # the test drives its rounds
    try:
        while mirror.round():
            pass
        assert mirror.cluster_id == cluster_id(b)
        assert kafka_offsets(b.bootstrap, unbound, topic, 2) == {(topic, 0): 2, (topic, 1): 2}
        assert kafka_offsets(b.bootstrap, on_a, topic, 2) == {}  # A's offsets are not B's positions
        assert (skipped(mirror), failures(mirror)) == (1, 0)

        argv = ["switch", "--all-groups", "--from-cluster-id", a_id, "--prefix", prefix, "--to-bootstrap-server",
                b.bootstrap, "--from-bootstrap-server", a.bootstrap, "--output", "json", "--execute"]  # fmt: skip
        done = groups(*argv)
        assert done.code == 0, done.err
        (switched,) = done.json()["groups"]  # the unbound group is not A's: left as it is
        assert (switched["group_id"], switched["status"]) == (on_a, "switched")
        moved = {(topic, r["partition"]): r["target_offset"] for r in switched["partitions"]}
        assert moved == {(topic, 0): 7, (topic, 1): 8}  # found by the fingerprints: each A offset + 3
        assert {r["method"] for r in switched["partitions"]} == {"exact"}
        assert stored_offsets(engine, on_a) == moved

        # The switch's history rows reach the mirror as any change; the group is bound to B now.
        while mirror.round():
            pass
        assert kafka_offsets(b.bootstrap, on_a, topic, 2) == moved
        assert kafka_describe(b, on_a) == {(topic, "0", "7", "13", "6"), (topic, "1", "8", "13", "5")}
        assert (skipped(mirror), failures(mirror)) == (1, 0)  # written once switched: skipped no more
    finally:
        mirror.stop()
