"""Issue 36: the server reads watermarks from Kafka itself (server/kafka_watermarks.py), against Tansu."""

from __future__ import annotations

from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from offsetstore.client import Watermark
from offsetstore.core.types import GroupStatus
from offsetstore.kafka_integration import testing
from offsetstore.server.kafka_watermarks import KafkaWatermarks

PORT = 25510  # this test's own broker, which it stops (the session's broker stays up)


def reader(store, bootstrap: str, prefix: str, **kwargs) -> KafkaWatermarks:
    found = KafkaWatermarks(store, bootstrap, [prefix], registry=CollectorRegistry(), request_seconds=2, **kwargs)
    return found.start_client()


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

    # An open transaction's records are no lag yet: the last stable offset (read_committed).
    producer = Producer(
        {**testing.producer_config(broker.bootstrap), "transactional.id": group_id, "enable.idempotence": True}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic.name, value=b"t", partition=1)
    producer.flush(10)
    marks.round()
    # Kafka's last stable offset is 10; Tansu answers 0, which the reader reads as the high watermark
    # 13 (server/kafka_watermarks.py). Never 0: offset 10 would look past the log end.
    assert client.describe_group(group_id).partitions[1].log_end_offset in (10, 13)
    producer.commit_transaction(10)
    marks.round()
    # Three records and the commit marker: a consumer that read them commits 14, no phantom lag of 1.
    assert client.describe_group(group_id).partitions[1].log_end_offset == 14
    assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_read_total") == 6
    producer.flush(1)


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


def test_a_broker_that_is_down_keeps_the_last_watermarks_and_counts(make_topic, store, client, group_id) -> None:
    with testing.TansuBroker(port=PORT) as own:
        testing.create_topic(own.bootstrap, "wm-down", 1)
        client.commit_offsets(group_id, {("wm-down", 0): 0})
        marks = reader(store, own.bootstrap, group_id)
        assert marks.round() == 1
        seen = client.describe_group(group_id).partitions[0].watermark_time
    assert marks.round() == 0  # the broker is gone
    after = client.describe_group(group_id).partitions[0]
    assert (after.log_end_offset, after.watermark_time) == (0, seen)
    assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_failures_total", {"reason": "broker"}) >= 1
    assert marks.registry.get_sample_value("offsetstore_kafka_watermarks_age_seconds") >= 0


def test_beyond_the_cap_rounds_take_the_partitions_round_robin(broker, make_topic, store, client, group_id) -> None:
    topic = make_topic(partitions=3, records=2)
    client.commit_offsets(group_id, {(topic.name, p): 0 for p in range(3)})
    marks = reader(store, broker.bootstrap, group_id, max_partitions=2)
    assert [marks.round(), marks.round(), marks.round()] == [2, 1, 2]  # 0 1 | 2 | 0 1
    assert [p.log_end_offset for p in client.describe_group(group_id).partitions] == [2, 2, 2]
