"""One huge observed Kafka group that Kafka lost stops no other group's observation (issue 57, hostile tenants).

The server's observer (:class:`KafkaGroupObserver`, one round as the server runs it) on Apache
Kafka: a group of 10,001 observed partitions that Kafka no longer lists (deleted, expired) is
flagged, and a small group committing to Kafka beside it is observed in the same round. Before,
the huge group's lost partitions overflowed one ObserveOffsets' 10,000 and the refusal ended
the round before any other group: while the huge group stayed gone, nothing else was observed.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient

from offsetstore.core.types import OffsetCommit
from offsetstore.runtime.store import Store
from offsetstore.server.kafka_groups import KafkaGroupObserver, kafka_source
from offsetstore.storage import validate

pytestmark = pytest.mark.kafka

HUGE = validate.MAX_PARTITIONS + 1


def test_a_lost_group_wider_than_one_call_is_flagged_and_the_others_are_still_observed(
    broker, make_topic, store: Store, engine: sa.Engine
) -> None:
    prefix = f"iso-{uuid.uuid4().hex[:8]}-"
    huge, small = f"{prefix}huge", f"{prefix}small"
    admin = AdminClient(broker.client_config())  # kept: a client collected mid-request fails it
    cluster = admin.describe_cluster(request_timeout=10).result(timeout=30).cluster_id
    # The huge group, observed from this cluster before Kafka lost it (in two calls: one takes 10,000).
    positions = [OffsetCommit("wide", p, 7) for p in range(HUGE)]
    for part in (positions[: validate.MAX_PARTITIONS], positions[validate.MAX_PARTITIONS :]):
        store.observe_offsets(huge, part, source=kafka_source(cluster, huge), actor="offsetstore")
    # The small group commits to Kafka as a consumer that assigns its partitions does.
    topic = make_topic(partitions=2, records=10)
    consumer = Consumer(broker.client_config(**{"group.id": small, "enable.auto.commit": False}))
    try:
        consumer.commit(
            offsets=[KafkaPartition(topic.name, 0, 4), KafkaPartition(topic.name, 1, 9)], asynchronous=False
        )
    finally:
        consumer.close()

    observer = KafkaGroupObserver(store, broker.bootstrap, [prefix]).start_client()
    observer.round()

    assert {(tp.partition, o.offset) for tp, o in store.fetch_offsets(small).offsets.items()} == {(0, 4), (1, 9)}
    with engine.connect() as conn:  # the flag DescribeGroup shows as observed_lost_partitions (capped at one call's)
        flagged = conn.execute(
            sa.text("SELECT lost_partitions FROM offsetstore.observed_groups WHERE group_id = :g"), {"g": huge}
        ).scalar_one()
    assert flagged == validate.MAX_PARTITIONS
    assert len(store.fetch_offsets(huge).offsets) == HUGE
