"""The writer's mirror: the offsets a transaction committed, committed again through the consumer into Kafka.

Tools that read Kafka's ``__consumer_offsets`` (Burrow, kafka-ui, ``kafka-consumer-groups``)
then see the group the writer stores its offsets for. A copy: the store stays the truth (the
consumer seeks to the stored offsets on restart, never to Kafka's), so the commit is
asynchronous and its failure is logged and counted, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from offsetstore.core.types import TopicPartition

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["ConsumerMirror"]

log = logging.getLogger("offsetstore.kafka_integration")


class ConsumerMirror:
    """Commits offsets through ``consumer`` asynchronously (``commit(offsets=..., asynchronous=True)``).

    The consumer's group (its ``group.id``) receives them. librdkafka reports the outcome of
    an asynchronous commit to the consumer's ``on_commit`` callback, if it has one; what fails
    before the request leaves (a consumer without ``group.id``, a closed one) is counted in
    :attr:`failures` and logged.
    """

    def __init__(self, consumer: confluent_kafka.Consumer) -> None:
        self.consumer = consumer
        #: Commits that could not be handed to the consumer.
        self.failures = 0

    def commit(self, committed: Mapping[TopicPartition, int]) -> None:
        """Hands ``committed`` (partition -> next offset) to the consumer; returns at once, never raises."""
        from confluent_kafka import TopicPartition as KafkaPartition

        offsets = [KafkaPartition(tp.topic, tp.partition, offset) for tp, offset in committed.items() if offset >= 0]
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except Exception as error:  # the store has the offsets: a failed copy is reported, not raised
            self.failures += 1
            log.warning("could not mirror offsets to Kafka: %s", error, extra={"partitions": len(offsets)})
