"""The id of the Kafka cluster a sink's query reads, from a metadata request (confluent-kafka, imported when asked)."""

from __future__ import annotations

from collections.abc import Mapping


def cluster_id(bootstrap_servers: str, config: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
    """The cluster id the brokers at ``bootstrap_servers`` (librdkafka ``config`` added: TLS, SASL) report."""
    try:
        from confluent_kafka.admin import AdminClient
    except ModuleNotFoundError as missing:
        raise ModuleNotFoundError(
            "ExactlyOnceSink(bootstrap_servers=...) reads the Kafka cluster's id with confluent-kafka, which the spark "
            "extra installs: pip install 'offsetstore[spark]' (or confluent-kafka itself)"
        ) from missing
    admin = AdminClient({**(config or {}), "bootstrap.servers": bootstrap_servers})
    found = admin.list_topics(timeout=timeout).cluster_id
    if not found:
        raise ValueError(f"the brokers at {bootstrap_servers} name no cluster id in their metadata")
    return str(found)
