"""What the groups CLI asks a Kafka broker with ``--bootstrap-server``: partitions, watermarks, offsets by time.

confluent-kafka (the ``kafka`` extra) is imported when a command asks, as PySpark is for
the Spark sink: the CLI works without it. The consumer made here never joins a group and
never commits; it only reads metadata and offsets, as kafka-consumer-groups does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from offsetstore.core.types import TopicPartition

__all__ = [
    "BrokerError",
    "group_members",
    "group_offsets",
    "offsets_for_times",
    "set_group_offsets",
    "topic_partitions",
    "watermarks",
]

#: Where librdkafka's own log lines go: nowhere a user sees. A broker that is down makes it
#: log every failed connection (169 lines in 10 s); the one error the command reports says it.
_QUIET = logging.getLogger("offsetstore.cli.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class BrokerError(Exception):
    """The broker could not be asked (no kafka extra, unreachable, unknown topic)."""


def _settings(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": _QUIET}


def _consumer(bootstrap: str) -> Any:
    try:
        from confluent_kafka import Consumer
    except ImportError:
        raise BrokerError(
            "--bootstrap-server needs confluent-kafka: pip install 'offsetstore[kafka]' (from a checkout)"
        ) from None
    return Consumer(
        {
            **_settings(bootstrap),
            # Never used for a join or a commit: only look-ups by partition.
            "group.id": "offsetstore-cli",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )


def _admin(bootstrap: str) -> Any:
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:
        raise BrokerError(
            "--bootstrap-server needs confluent-kafka: pip install 'offsetstore[kafka]' (from a checkout)"
        ) from None
    return AdminClient(_settings(bootstrap))


def _answer(bootstrap: str, what: str, future: Any, timeout: float) -> Any:
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout=timeout)
    except KafkaException as error:
        raise BrokerError(f"the broker at {bootstrap} did not answer {what}: {error.args[0].str()}") from None
    except TimeoutError:
        raise BrokerError(f"the broker at {bootstrap} did not answer {what} within {timeout:g}s") from None


def group_offsets(bootstrap: str, group: str, *, timeout: float = 10.0) -> dict[TopicPartition, int]:
    """The offsets Kafka's group ``group`` has committed (OffsetFetch), by partition; {} for none."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = _admin(bootstrap)
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
    answer = _answer(bootstrap, f"an offset fetch of group {group}", futures[group], timeout)
    return {
        TopicPartition(tp.topic, tp.partition): tp.offset
        for tp in answer.topic_partitions
        if tp.error is None and tp.offset >= 0  # -1001: no offset committed
    }


def group_members(bootstrap: str, group: str, *, timeout: float = 10.0) -> int:
    """How many members Kafka's group ``group`` has now (0 for an empty or unknown group)."""
    admin = _admin(bootstrap)
    futures = admin.describe_consumer_groups([group], request_timeout=timeout)
    return len(_answer(bootstrap, f"a description of group {group}", futures[group], timeout).members)


def set_group_offsets(
    bootstrap: str, group: str, offsets: Mapping[TopicPartition, int], *, timeout: float = 10.0
) -> None:
    """Commits ``offsets`` as Kafka's group ``group`` (AlterConsumerGroupOffsets: the group must be empty)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaPartition

    admin = _admin(bootstrap)
    request = ConsumerGroupTopicPartitions(
        group, [KafkaPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())]
    )
    futures = admin.alter_consumer_group_offsets([request], request_timeout=timeout)
    answer = _answer(bootstrap, f"an offset commit of group {group}", futures[group], timeout)
    failed = [f"{tp.topic}:{tp.partition} ({tp.error.str()})" for tp in answer.topic_partitions if tp.error]
    if failed:
        raise BrokerError(f"the broker at {bootstrap} refused offsets of group {group}: {', '.join(failed)}")


def _ask(bootstrap: str, what: str, call):  # noqa: ANN001, ANN202
    from confluent_kafka import KafkaException

    consumer = _consumer(bootstrap)
    try:
        return call(consumer)
    except KafkaException as error:
        raise BrokerError(f"the broker at {bootstrap} did not answer {what}: {error.args[0].str()}") from None
    finally:
        consumer.close()


def topic_partitions(bootstrap: str, topics: Iterable[str], *, timeout: float = 10.0) -> dict[str, list[int]]:
    """Every partition of each topic, from the broker's metadata; BrokerError for an unknown topic."""

    def call(consumer: Any) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise BrokerError(f"topic {topic} does not exist on the broker at {bootstrap}")
            found[topic] = sorted(meta.partitions)
        return found

    return _ask(bootstrap, "a metadata request", call)


def watermarks(
    bootstrap: str, partitions: Iterable[TopicPartition], *, timeout: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """(log start, log end) of each partition, as the broker answers them now."""

    def call(consumer: Any) -> dict[TopicPartition, tuple[int, int]]:
        from confluent_kafka import TopicPartition as KafkaPartition

        marks = {}
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=timeout)
            marks[tp] = (low, high)
        return marks

    return _ask(bootstrap, "a watermark request", call)


def offsets_for_times(
    bootstrap: str, partitions: Sequence[TopicPartition], instant: datetime, *, timeout: float = 10.0
) -> dict[TopicPartition, int]:
    """For each partition, the offset of its first record with a timestamp at or after ``instant``.

    Where no record is that recent, the log end (kafka-consumer-groups does the same). The
    broker answers from its time index (ListOffsets by timestamp, ``offsets_for_times``), as
    for ``kafka-consumer-groups --reset-offsets --to-datetime``.
    """

    def call(consumer: Any) -> dict[TopicPartition, int]:
        from confluent_kafka import TopicPartition as KafkaPartition

        millis = int(instant.timestamp() * 1000)
        asked = [KafkaPartition(tp.topic, tp.partition, millis) for tp in partitions]
        found: dict[TopicPartition, int] = {}
        for answer in consumer.offsets_for_times(asked, timeout=timeout):
            tp = TopicPartition(answer.topic, answer.partition)
            if answer.error is not None:
                raise BrokerError(f"the broker at {bootstrap} has no offsets of {tp.topic}:{tp.partition}")
            offset = answer.offset
            if offset < 0:  # no record that recent: the log end
                offset = consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=timeout)[1]
            found[tp] = offset
        return found

    return _ask(bootstrap, "an offsets-for-times request", call)


def expand(selection: Mapping[str, list[int]], known: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """The selection with each whole topic (an empty list) replaced by its partitions in ``known``."""
    return {topic: list(parts) or list(known.get(topic, [])) for topic, parts in selection.items()}
