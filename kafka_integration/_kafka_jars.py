"""Which Apache Kafka the local pieces run: its pinned version, its jars (fetched with Maven once) and its tools' classes."""

from __future__ import annotations

import os

from offsetstore.kafka_integration._local_jvm import LOGGING_ARTIFACTS
from offsetstore.kafka_integration.maven import MissingPiece, maven_classpath

#: The one Apache Kafka version the tests, the bench and ``make kafka`` run.
KAFKA_VERSION = "4.3.1"

#: Kafka's shell tools by their script names, as classes of the same jars.
TOOLS = {
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-storage": "kafka.tools.StorageTool",
}


class KafkaUnavailable(MissingPiece):
    """Apache Kafka cannot run here; the message names what to install or set."""


def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    """The classpath of Apache Kafka ``version``'s broker and tools (fetched with Maven once)."""
    artifacts = (
        f"org.apache.kafka:kafka_2.13:{version}",
        f"org.apache.kafka:kafka-tools:{version}",
        *LOGGING_ARTIFACTS,
    )
    try:
        return os.pathsep.join(maven_classpath(artifacts, name=f"apache-kafka-{version}"))
    except MissingPiece as e:
        raise KafkaUnavailable(str(e)) from None


def mirror_maker_classpath(version: str = KAFKA_VERSION) -> str:
    """The classpath of :func:`kafka_classpath` and MirrorMaker 2 (``connect-mirror``) of the same version, fetched once."""
    artifacts = (
        f"org.apache.kafka:kafka_2.13:{version}",  # first: where both need a library, the broker's version of it
        f"org.apache.kafka:kafka-tools:{version}",
        f"org.apache.kafka:connect-mirror:{version}",
        *LOGGING_ARTIFACTS,
    )
    try:
        return os.pathsep.join(maven_classpath(artifacts, name=f"apache-kafka-mirror-maker-{version}"))
    except MissingPiece as e:
        raise KafkaUnavailable(str(e)) from None
