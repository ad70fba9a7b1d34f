"""Record fingerprints: what identifies a Kafka record on any cluster that holds a copy of it (issue 58).

A fingerprint is the record's timestamp and a digest of its key, value and headers; the digest's
rule is :mod:`offsetstore.sink.fingerprints`' (every sink shares it), re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.sink.fingerprints import digest  # the rule every sink shares

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["digest", "fingerprint", "last_fingerprints"]


def fingerprint(message: confluent_kafka.Message) -> RecordFingerprint:
    """The fingerprint of ``message``, for the committed offset just after it."""
    return RecordFingerprint(
        message.offset() + 1, message.timestamp()[1], digest(message.key(), message.value(), message.headers())
    )


def last_fingerprints(
    messages: Sequence[confluent_kafka.Message], committed: Mapping[TopicPartition, int]
) -> dict[TopicPartition, RecordFingerprint]:
    """The fingerprint of the record before each committed offset, where that record is among ``messages``."""
    last: dict[TopicPartition, confluent_kafka.Message] = {}
    for m in messages:
        tp = TopicPartition(m.topic(), m.partition())
        if committed.get(tp) == m.offset() + 1:
            last[tp] = m
    return {tp: fingerprint(m) for tp, m in last.items()}
