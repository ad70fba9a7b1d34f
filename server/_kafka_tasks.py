"""The Kafka tasks the ``serve`` supervisor runs once for the whole server (not in each serving process).

Each is started only when its flags ask for it; confluent-kafka is imported then, not before.
"""

from __future__ import annotations

from typing import Any

from offsetstore.server.auth import AuthConfig
from offsetstore.server.config import Settings


def watermarks_reader(settings: Settings, store: Any, registry: Any) -> Any:
    """The Kafka watermark reader (once, here: not in each serving process), started; None unless configured."""
    if not settings.watermarks_kafka_bootstrap:
        return None
    from offsetstore.server.kafka_mirror import parse_prefixes
    from offsetstore.server.kafka_watermarks import KafkaWatermarks, TopicPolicy, read_client_config

    if settings.watermarks_kafka_topics.strip(","):
        topics = TopicPolicy(topic_prefixes=parse_prefixes(settings.watermarks_kafka_topics))
    elif settings.tokens_file is not None:
        # The grants in force at start: the supervisor does not reread the file on SIGHUP.
        topics = TopicPolicy(principals=AuthConfig.load(settings.tokens_file).principals.values())
    else:
        topics = TopicPolicy()
    # Observed Kafka groups are watched too: their lag needs the log ends.
    prefixes = parse_prefixes(",".join((settings.watermarks_kafka_groups, settings.observe_kafka_groups)))
    return KafkaWatermarks(
        store,
        settings.watermarks_kafka_bootstrap,
        prefixes,
        settings.watermarks_kafka_interval,
        settings.watermarks_kafka_max_partitions,
        config=read_client_config(settings.watermarks_kafka_config),
        registry=registry,
        topics=topics,
    ).start()


def kafka_group_observer(settings: Settings, store: Any, registry: Any) -> Any:
    """The Kafka group observer (once, here), started; None unless ``--observe-kafka-groups``."""
    if not settings.observe_kafka_groups.strip(","):
        return None
    from offsetstore.server.kafka_groups import KafkaGroupObserver
    from offsetstore.server.kafka_mirror import parse_prefixes
    from offsetstore.server.kafka_watermarks import read_client_config

    return KafkaGroupObserver(
        store,
        settings.watermarks_kafka_bootstrap,
        parse_prefixes(settings.observe_kafka_groups),
        settings.observe_kafka_interval,
        settings.watermarks_kafka_max_partitions,
        config=read_client_config(settings.watermarks_kafka_config),
        registry=registry,
    ).start()


def kafka_mirror(settings: Settings, store: Any) -> Any:
    """The Kafka mirror (once, here: not in each serving process), started; None unless ``--mirror-kafka-bootstrap``."""
    if not settings.mirror_kafka_bootstrap:
        return None
    from prometheus_client import CollectorRegistry

    from offsetstore.server.kafka_mirror import KafkaMirror, parse_prefixes

    return KafkaMirror(
        store,
        settings.mirror_kafka_bootstrap,
        parse_prefixes(settings.mirror_kafka_groups),
        settings.mirror_interval,
        # Never served: its counters live in the multiprocess files that ``registry`` sums (registered
        # there as well, they would be scraped twice).
        registry=CollectorRegistry(),
    ).start()
