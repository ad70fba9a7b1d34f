"""The server reads watermarks from Apache Kafka itself (server/kafka_watermarks.py): transactions, retention, SASL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from offsetstore.client import OffsetStoreClient, Watermark
from offsetstore.core.types import GroupStatus
from offsetstore.server.kafka_watermarks import KafkaWatermarks
from tests.fixtures.fix_apache_kafka import SCRAM_CLIENT
from tests.fixtures.fix_server import start_serve
from tests.fixtures.waits import wait_for

pytestmark = pytest.mark.kafka


def reader(store, bootstrap: str, prefix: str, **kwargs) -> KafkaWatermarks:
    found = KafkaWatermarks(store, bootstrap, [prefix], registry=CollectorRegistry(), request_seconds=2, **kwargs)
    return found.start_client()


def log_end(client, group_id: str, marks: KafkaWatermarks, partition: int) -> int:
    marks.round()
    return client.describe_group(group_id).partitions[partition].log_end_offset


def test_the_reader_stores_log_ends_of_watched_groups_and_the_last_stable_offset(
    broker, make_topic, store, client, group_id
) -> None:
    topic = make_topic(partitions=2, records=10)
    client.commit_offsets(group_id, {(topic.name, 0): 4, (topic.name, 1): 10})
    client.commit_offsets(f"other-{group_id}", {(topic.name, 0): 1})
    marks = reader(store, broker.bootstrap, group_id)
    assert marks.round() == 2
    described = client.describe_group(group_id)
    assert [(p.log_start_offset, p.log_end_offset, p.lag) for p in described.partitions] == [(0, 10, 6), (0, 10, 0)]
    assert all(p.watermark_time >= p.commit_time for p in described.partitions)
    assert [p.status for p in described.partitions] == [GroupStatus.OK, GroupStatus.OK]

    producer = Producer(broker.producer_config(**{"transactional.id": group_id}))
    producer.init_transactions(30)
    # Open: its records (10..12) are no lag yet; the last stable offset is the transaction's first.
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic.name, value=b"t", partition=1)
    assert producer.flush(30) == 0
    assert log_end(client, group_id, marks, 1) == 10
    # Committed: three records and the commit marker (13), so a consumer that read them commits 14.
    # The markers are written after commit_transaction returns: waited for.
    producer.commit_transaction(30)
    wait_for(lambda: log_end(client, group_id, marks, 1) == 14, "the committed transaction's marker")
    # Aborted: two records (14, 15) no read_committed consumer ever sees, and the abort marker (16).
    producer.begin_transaction()
    for _ in range(2):
        producer.produce(topic.name, value=b"a", partition=1)
    assert producer.flush(30) == 0
    assert log_end(client, group_id, marks, 1) == 14
    producer.abort_transaction(30)
    wait_for(lambda: log_end(client, group_id, marks, 1) == 17, "the aborted transaction's marker")
    assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_failures_total", {"reason": "broker"}) is None


def test_an_open_transaction_at_the_log_start_is_no_lag(broker, make_topic, store, client, group_id) -> None:
    """The last stable offset may equal the log start (Kafka: the open transaction's first offset): it is the end."""
    topic = make_topic(partitions=1)
    client.commit_offsets(group_id, {(topic.name, 0): 0})
    marks = reader(store, broker.bootstrap, group_id)
    producer = Producer(broker.producer_config(**{"transactional.id": group_id}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic.name, value=b"t", partition=0)
    assert producer.flush(30) == 0
    assert log_end(client, group_id, marks, 0) == 0  # not the high watermark, 3
    assert client.describe_group(group_id).partitions[0].lag == 0
    producer.abort_transaction(30)


def test_records_deleted_below_the_offset_make_the_group_lost(broker, make_topic, store, client, group_id, tmp_path):
    """LOST from Kafka's own log start, moved by an operator's kafka-delete-records (what retention does)."""
    topic = make_topic(partitions=1, records=10)
    client.commit_offsets(group_id, {(topic.name, 0): 2})
    marks = reader(store, broker.bootstrap, group_id)
    assert marks.round() == 1
    assert client.describe_group(group_id).status != GroupStatus.LOST

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic.name, "partition": 0, "offset": 6}]}))
    deleted = broker.tool(
        "kafka-delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", str(plan)
    )
    assert "low_watermark: 6" in deleted.stdout, deleted.stdout
    marks.round()
    described = client.describe_group(group_id)
    assert (described.partitions[0].log_start_offset, described.partitions[0].log_end_offset) == (6, 10)
    assert described.status == GroupStatus.LOST
    assert "4 records deleted unread" in described.partitions[0].status_reason


def test_a_newer_report_wins_and_a_missing_partition_keeps_its_last_watermark(
    broker, make_topic, store, client, group_id
) -> None:
    topic = make_topic(partitions=1, records=5)
    client.commit_offsets(group_id, {(topic.name, 0): 5, (topic.name, 7): 3})  # partition 7 does not exist
    client.report_watermarks([Watermark(topic.name, 7, 0, 9)])
    marks = reader(store, broker.bootstrap, group_id)
    assert marks.round() == 1
    described = {p.partition: p for p in client.describe_group(group_id).partitions}
    assert (described[0].log_end_offset, described[7].log_end_offset) == (5, 9)
    assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_failures_total", {"reason": "partition"}) == 1
    # A consumer's report after the reader's read wins, and the reader's next read wins over it.
    client.report_watermarks([Watermark(topic.name, 0, 0, 7)])
    assert client.describe_group(group_id).partitions[0].log_end_offset == 7
    marks.round()
    assert client.describe_group(group_id).partitions[0].log_end_offset == 5


def test_beyond_the_cap_rounds_take_the_partitions_round_robin(broker, make_topic, store, client, group_id) -> None:
    topic = make_topic(partitions=3, records=2)
    client.commit_offsets(group_id, {(topic.name, p): 0 for p in range(3)})
    marks = reader(store, broker.bootstrap, group_id, max_partitions=2)
    assert [marks.round(), marks.round(), marks.round()] == [2, 1, 2]  # 0 1 | 2 | 0 1
    assert [p.log_end_offset for p in client.describe_group(group_id).partitions] == [2, 2, 2]


# --- a broker that requires SASL/SCRAM ---


@pytest.mark.slow
def test_a_scram_broker_is_read_with_the_config_file_and_refuses_the_reader_without_it(
    sasl_kafka, store, client, group_id
) -> None:
    sasl_kafka.create_topic(f"{group_id}-t", 1)
    produce_to(sasl_kafka, f"{group_id}-t", 4)
    client.commit_offsets(group_id, {(f"{group_id}-t", 0): 1})
    refused = reader(store, sasl_kafka.bootstrap, group_id)
    assert refused.round() == 0  # no credentials: the broker closes the connection
    assert refused.registry.get_sample_value("offsetstore_kafka_watermarks_failures_total", {"reason": "broker"}) >= 1
    assert client.describe_group(group_id).partitions[0].log_end_offset == -1

    marks = reader(store, sasl_kafka.bootstrap, group_id, config=SCRAM_CLIENT)
    assert marks.round() == 1
    assert client.describe_group(group_id).partitions[0].log_end_offset == 4

    # The broker crashes: the last watermarks stay, their age grows; back, it is read again.
    seen = client.describe_group(group_id).partitions[0].watermark_time
    sasl_kafka.kill(1)
    try:
        assert marks.round() == 0
        after = client.describe_group(group_id).partitions[0]
        assert (after.log_end_offset, after.watermark_time) == (4, seen)
        assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_failures_total", {"reason": "broker"}) >= 1
        assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_age_seconds") >= 0
    finally:
        sasl_kafka.start_node(1)
        sasl_kafka.wait_ready()
    wait_for(lambda: marks.round() == 1, "the reader to read the restarted broker")


@pytest.mark.slow
def test_serve_reads_a_scram_broker_through_watermarks_kafka_config(
    sasl_kafka, database_url, group_id, tmp_path: Path
) -> None:
    topic = f"{group_id}-served"
    sasl_kafka.create_topic(topic, 2)
    produce_to(sasl_kafka, topic, 6, partitions=2)
    properties = tmp_path / "reader.properties"
    properties.write_text("# the watermark reader's client\n" + "".join(f"{k}={v}\n" for k, v in SCRAM_CLIENT.items()))
    served = start_serve(
        tmp_path / "data",
        "--database-url", database_url,
        "--watermarks-kafka-bootstrap", sasl_kafka.bootstrap,
        "--watermarks-kafka-groups", group_id,
        "--watermarks-kafka-interval", "0.3s",
        "--watermarks-kafka-config", str(properties),
    )  # fmt: skip
    try:
        with OffsetStoreClient(served.address, timeout=10) as served_client:
            served_client.commit_offsets(group_id, {(topic, 0): 2, (topic, 1): 6})

            def read() -> bool:
                return [(p.log_end_offset, p.lag) for p in served_client.describe_group(group_id).partitions] == [
                    (6, 4),
                    (6, 0),
                ]

            wait_for(read, "serve's reader to store the SCRAM broker's log ends")
    finally:
        assert served.terminate() == 0, served.output()
    assert "reader-secret" not in served.output()  # the password is never logged


def produce_to(cluster, topic: str, records: int, partitions: int = 1) -> None:
    """``records`` records into each partition of ``topic``, with the cluster's client settings (SASL)."""
    producer = Producer(cluster.producer_config())
    for _ in range(records):
        for p in range(partitions):
            producer.produce(topic, value=b"s", partition=p)
    assert producer.flush(30) == 0
