"""The Kafka mirror on the local broker: offsets any writer stores show in Kafka's group coordinator."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition

from offsetstore import storage
from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import OffsetCommit
from offsetstore.kafka_integration import ExactlyOnceWriter, consumer_config
from offsetstore.server.kafka_mirror import KafkaMirror
from offsetstore.sink.batch_write import SinkTarget, deliver_batch
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_server import ServerHandle, free_port, start_serve
from tests.fixtures.fix_spark_kafka import kafka_source
from tests.fixtures.kafka_mirror import (
    COLUMNS,
    commit,
    consume_all,
    failures,
    kafka_describe,
    kafka_offsets,
    new_mirror,
    written,
)

pytestmark = pytest.mark.kafka


def eventually(read: Callable[[], object], expected: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (found := read()) != expected:
        assert time.monotonic() < deadline, f"{found!r} != {expected!r}"
        time.sleep(0.2)


@pytest.fixture
def mirrored_server(broker, store) -> Iterator[tuple[ServerHandle, KafkaMirror, OffsetStoreClient]]:
    """A gRPC server and, beside it, the mirror of groups ``mirror-*`` (it reads the store, not the server)."""
    mirror = new_mirror(store, broker.bootstrap, ["mirror-"]).start()
    server = ServerHandle(store, "127.0.0.1:0").start()
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
    mirror = new_mirror(store, f"127.0.0.1:{free_port()}", ["g-"], request_seconds=2)
    mirror.start()
    server = ServerHandle(store, "127.0.0.1:0").start()
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


def test_one_mirror_a_database_and_another_server_takes_over(broker, store, engine, make_topic):
    """Two servers' mirrors on one database: one writes (the lock), the other takes over when it stops."""
    topic = make_topic(partitions=1)
    prefix = f"mirror-{uuid.uuid4().hex[:8]}-"
    group = f"{prefix}g"
    first = new_mirror(store, broker.bootstrap, [prefix]).start()
    second = None
    try:
        commit(engine, group, {(topic.name, 0): 3})
        eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 1), {(topic.name, 0): 3})
        second = new_mirror(store, broker.bootstrap, [prefix]).start()
        commit(engine, group, {(topic.name, 0): 5})
        eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 1), {(topic.name, 0): 5})
        assert (written(first), written(second)) == (2, 0)
        first.stop()  # its server stops: the lock is free
        commit(engine, group, {(topic.name, 0): 8})
        eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 1), {(topic.name, 0): 8})
        assert written(second) >= 1
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_transaction_that_commits_after_a_later_one_is_mirrored_too(broker, store, engine, make_topic):
    """History ids are taken at insert and seen at COMMIT: the cursor passes an open transaction's, and comes back for it."""
    topic = make_topic(partitions=1)
    prefix = f"mirror-{uuid.uuid4().hex[:8]}-"
    slow, fast = f"{prefix}slow", f"{prefix}fast"
    mirror = new_mirror(store, broker.bootstrap, [prefix]).start()
    try:
        with engine.connect() as conn:
            with conn.begin():  # the sink's long transaction: its offsets are written, its COMMIT comes later
                storage.commit_offsets(conn, slow, [OffsetCommit(topic.name, 0, 4)])
                commit(engine, fast, {(topic.name, 0): 6})  # a later id, committed first
                eventually(lambda: kafka_offsets(broker.bootstrap, fast, topic.name, 1), {(topic.name, 0): 6})
                assert kafka_offsets(broker.bootstrap, slow, topic.name, 1) == {}
        eventually(lambda: kafka_offsets(broker.bootstrap, slow, topic.name, 1), {(topic.name, 0): 4})
        assert failures(mirror) == 0
    finally:
        mirror.stop()


def test_one_tenants_flood_of_commits_neither_pushes_out_nor_holds_back_another_tenant(
    broker, store, engine, make_topic
):
    """A group committed in a loop is copied once per partition, and a huge group takes its share of a round, no more."""
    topic = make_topic(partitions=40)
    prefix = f"mirror-{uuid.uuid4().hex[:8]}-"
    flooder, victim = f"{prefix}flood", f"{prefix}victim"
    for offset in range(1, 301):  # one tenant committing in a loop
        commit(engine, flooder, {(topic.name, 0): offset})
    commit(engine, flooder, {(topic.name, p): 7 for p in range(1, 40)})  # and a wide commit
    commit(engine, victim, {(topic.name, 3): 5})
    # Rounds run by the test (no thread): 10 partitions a round, shared by the two groups.
    mirror = new_mirror(store, broker.bootstrap, [prefix], max_partitions=10)
    mirror.start_client()
    try:
        mirror.round()
        assert kafka_offsets(broker.bootstrap, victim, topic.name, 40) == {(topic.name, 3): 5}
        assert len(kafka_offsets(broker.bootstrap, flooder, topic.name, 40)) == 5  # its share: 10 // 2 groups
        rounds = 1
        while mirror.round() or mirror.pending_partitions:
            rounds += 1
        mirror.round()
    finally:
        mirror.stop()
    print(f"flood: 300 commits of one partition + 39 partitions copied in {rounds + 1} rounds of 10")
    assert kafka_offsets(broker.bootstrap, flooder, topic.name, 40) == stored_offsets(engine, flooder)
    assert kafka_offsets(broker.bootstrap, flooder, topic.name, 40)[(topic.name, 0)] == 300
    # Each partition once, at its latest offset: 300 commits of partition 0 are one write.
    assert mirror.registry.get_sample_value("offsetstore_kafka_mirror_offsets_total") == 41
    assert mirror.registry.get_sample_value("offsetstore_kafka_mirror_dropped_commits_total") == 0


def test_a_sink_commit_in_its_own_transaction_and_the_sql_api_are_mirrored(
    broker, store, database_url, engine, make_topic, make_table
):
    """Writers that never call the server: the sinks' batch write (Spark's, the Kafka recipe's) and the SQL API."""
    import pyarrow as pa

    topic = make_topic(partitions=2, records=10)
    table = make_table()
    prefix = f"mirror-{uuid.uuid4().hex[:8]}-"
    sink_group, sql_group = f"{prefix}spark", f"{prefix}sql"
    mirror = new_mirror(store, broker.bootstrap, [prefix]).start()
    try:
        rows = pa.table(
            {
                "topic": [topic.name] * 7,
                "partition": pa.array([0, 0, 0, 0, 1, 1, 1], pa.int32()),
                "offset": pa.array([0, 1, 2, 3, 0, 1, 2], pa.int64()),
                "value": ["v"] * 7,
            }
        )
        with engine.begin() as conn:  # the Spark sink's write, in a transaction of its own
            deliver_batch(conn, SinkTarget(table.name), rows, group_id=sink_group, generation=0, actor="spark:test")
        with engine.begin() as conn:  # the SQL API, as docs/sql.md calls it
            conn.exec_driver_sql(
                "SELECT * FROM offsetstore.commit_offsets(%s, 0, ARRAY[%s, %s], ARRAY[0, 1], ARRAY[9, 10])",
                (sql_group, topic.name, topic.name),
            )
        # Waited for through the admin API (fast), then read with Kafka's own tool (a JVM a call).
        eventually(
            lambda: kafka_offsets(broker.bootstrap, sink_group, topic.name, 2), stored_offsets(engine, sink_group)
        )
        eventually(lambda: kafka_offsets(broker.bootstrap, sql_group, topic.name, 2), stored_offsets(engine, sql_group))
        assert kafka_describe(broker, sink_group) == {
            (topic.name, "0", "4", "10", "6"),
            (topic.name, "1", "3", "10", "7"),
        }
        assert kafka_describe(broker, sql_group) == {
            (topic.name, "0", "9", "10", "1"),
            (topic.name, "1", "10", "10", "0"),
        }
        assert failures(mirror) == 0
    finally:
        mirror.stop()


def test_serve_mirrors_once_whatever_its_processes(broker, database_url, engine, make_topic, tmp_path):
    """``offsetstore serve --processes 2``: the supervisor mirrors (one mirror), an SQL API commit reaches Kafka's tool."""
    topic = make_topic(partitions=2, records=10)
    prefix = f"mirror-{uuid.uuid4().hex[:8]}-"
    group = f"{prefix}sql"
    served = start_serve(
        tmp_path / "data",
        *("--database-url", database_url, "--processes", "2", "--log-format", "json"),
        *("--mirror-kafka-bootstrap", broker.bootstrap, "--mirror-kafka-groups", prefix, "--mirror-interval", "1s"),
    )
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "SELECT * FROM offsetstore.commit_offsets(%s, 0, ARRAY[%s, %s], ARRAY[0, 1], ARRAY[3, 10])",
                (group, topic.name, topic.name),
            )
        eventually(
            lambda: kafka_offsets(broker.bootstrap, group, topic.name, 2), {(topic.name, 0): 3, (topic.name, 1): 10}
        )
        assert kafka_describe(broker, group) == {(topic.name, "0", "3", "10", "7"), (topic.name, "1", "10", "10", "0")}
        # The supervisor's /metrics counts the mirror's writes, once.
        with urllib.request.urlopen(f"http://{served.metrics}/metrics", timeout=10) as response:
            scraped = [
                line for line in response.read().decode().splitlines() if line.startswith("offsetstore_kafka_mirror")
            ]
        written_lines = [line for line in scraped if line.startswith("offsetstore_kafka_mirror_offsets_total")]
        assert written_lines == ["offsetstore_kafka_mirror_offsets_total 2.0"], scraped
    finally:
        assert served.terminate() == 0
    assert served.output().count("kafka mirror started") == 1, served.output()


@pytest.mark.spark
def test_a_spark_queries_group_shows_in_kafkas_own_describe(
    spark, kafka_connector_jars, broker, store, database_url, engine, make_topic, make_table, tmp_path
):
    """Spark's Kafka source, the ExactlyOnceSink in foreachBatch, and the group in ``kafka-consumer-groups --describe``."""
    from pyspark.sql.functions import col

    from offsetstore.spark_integration import ExactlyOnceSink
    from tests.fixtures.fix_spark import run_available_now

    topic = make_topic(partitions=3, records=20)
    table = make_table()
    group = f"mirror-spark-{uuid.uuid4().hex[:8]}"
    mirror = new_mirror(store, broker.bootstrap, ["mirror-spark-"], interval=1.0).start()
    try:
        df = kafka_source(spark, broker.bootstrap, topic.name, maxOffsetsPerTrigger=25).select(
            col("topic"), col("partition"), col("offset"), col("value").cast("string")
        )
        sink = ExactlyOnceSink(
            database_url, group, str(table.name), write_path="driver", watch_idle=False, progress=False
        )
        run_available_now(df, sink, tmp_path / "checkpoint")
        committed = time.monotonic()
        assert stored_offsets(engine, group) == topic.at_end()
        eventually(lambda: kafka_offsets(broker.bootstrap, group, topic.name, 3), topic.at_end())
        print(f"spark group in Kafka {time.monotonic() - committed:.2f} s after the query's last commit (interval 1 s)")
        assert kafka_describe(broker, group) == {(topic.name, str(p), "20", "20", "0") for p in range(3)}
        assert failures(mirror) == 0
    finally:
        mirror.stop()
