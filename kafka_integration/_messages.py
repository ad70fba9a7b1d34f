"""What the writer and the committer take alike from confluent-kafka messages and from the consumer's process."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import confluent_kafka


def refuse_errors(messages: Sequence[confluent_kafka.Message]) -> None:
    """ValueError for the first message that carries an error: it has no record to write or commit."""
    for m in messages:
        if m.error() is not None:
            raise ValueError(f"message of {m.topic()}[{m.partition()}] carries an error: {m.error()}")


def default_member_id() -> str:
    """``"kafka:<host>:<pid>"``: who joined the group, as history and DescribeGroup show it."""
    return f"kafka:{socket.gethostname()}:{os.getpid()}"


def kafka_cluster_id(client: confluent_kafka.Consumer | confluent_kafka.Producer, timeout: float = 10.0) -> str:
    """The id of the Kafka cluster ``client`` is connected to, from a metadata request."""
    found = client.list_topics(timeout=timeout).cluster_id
    if not found:
        raise ValueError("the broker's metadata names no cluster id")
    return str(found)
