"""Topics and producers on a Kafka that tests and benches make: a topic whose every partition has a leader, an ordered producer."""

from __future__ import annotations

import time
from collections.abc import Mapping

__all__ = ["create_topic", "producer_config"]


def producer_config(bootstrap: str, **extra: object) -> dict[str, object]:
    """A confluent-kafka producer config for tests: idempotent, so retried sends keep their order."""
    return {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **extra}


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
    client: Mapping[str, object] | None = None,
    timeout: float = 30.0,
) -> None:
    """Creates ``topic`` and waits until every partition has a leader that the metadata shows."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=dict(config or {}))
    admin.create_topics([new])[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in meta.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} has no leader for each of its {partitions} partitions after {timeout}s")
        time.sleep(0.1)
