"""The tests' Apache Kafka: KRaft brokers from Maven's jars, Kafka's own tools, and one clear line where a piece is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from offsetstore.kafka_integration.local_kafka import KAFKA_VERSION, KafkaCluster

pytestmark = pytest.mark.kafka


def _produce(cluster: KafkaCluster, topic: str, n: int, **extra: object) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.producer_config(**extra))
    for i in range(n):
        producer.produce(topic, value=str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0


def test_kafkas_own_group_command_reads_a_commit(kafka_broker: KafkaCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic, group = f"t-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(topic, 2)
    _produce(kafka_broker, topic, 10)
    consumer = Consumer(kafka_broker.client_config(**{"group.id": group}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False)
    finally:
        consumer.close()
    out = kafka_broker.tool("kafka-consumer-groups", "--bootstrap-server", kafka_broker.bootstrap,
                            "--describe", "--group", group).stdout  # fmt: skip
    rows = {tuple(line.split()[1:6]) for line in out.splitlines() if line.startswith(group)}
    # TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG: 10 records, 5 in each partition.
    assert rows == {(topic, "0", "3", "5", "2"), (topic, "1", "5", "5", "0")}


@pytest.mark.slow
def test_three_brokers_keep_acknowledged_records_across_a_killed_broker(kafka_cluster3: KafkaCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka_cluster3.create_topic(topic, 2, replication=3)
    _produce(kafka_cluster3, topic, 100, acks="all")
    kafka_cluster3.kill(2)
    try:
        _produce(kafka_cluster3, topic, 100, acks="all")  # min.insync.replicas 2 of 3: still accepted
    finally:
        kafka_cluster3.start_node(2)
        kafka_cluster3.wait_ready()
    consumer = Consumer(kafka_cluster3.client_config(**{"group.id": "reader"}))
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    finally:
        consumer.close()
    assert ends == [100, 100]


def _fetch(env: dict[str, str], version: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from offsetstore.kafka_integration.local_kafka import KafkaUnavailable, kafka_classpath\n"
        f"try:\n    kafka_classpath({version!r})\nexcept KafkaUnavailable as e:\n    print(e)\n    raise SystemExit(2)\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_no_maven_on_a_first_fetch_is_one_line_naming_what_to_install(tmp_path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable)}
    done = _fetch(env, KAFKA_VERSION)
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip().splitlines() == [
        f"apache-kafka-{KAFKA_VERSION} needs Maven to fetch its jars once: apt-get install maven"
    ]


def test_a_version_maven_cannot_fetch_is_one_line_not_a_traceback(tmp_path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = _fetch(env, "0.0.0-no-such-version")
    assert done.returncode == 2, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Maven could not fetch apache-kafka-0.0.0-no-such-version"), lines
    assert "Traceback" not in done.stderr
