"""offsetstore's Flink sink and offsets initializer from a PyFlink DataStream job: the Java classes through PyFlink's gateway.

This package needs PyFlink alone (``apache-flink``, the version of the jars) and nothing else of
offsetstore, so it runs where offsetstore's own dependencies cannot: apache-flink 2.2 pins
``grpcio<1.66`` and ``protobuf<6`` (through apache-beam 2.61), offsetstore needs grpcio 1.85 and
protobuf 7. Install it into PyFlink's environment from a checkout, ``pip install --no-deps .`` (or the wheel); the
jars come from offsetstore's environment, ``python -m offsetstore.flink_integration --pyflink``
(docs/flink.md, "PyFlink").

A job calls :func:`use_jars` first (it checks the jars were built for this PyFlink's Flink), then
reads with :func:`kafka_rows_source` (or :func:`store_offsets` in a source of its own) and writes
with :func:`offsetstore_sink`. The rows the sink takes start with the record's topic (STRING),
partition (INT) and offset (BIGINT), as :func:`kafka_rows_source` makes them.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from urllib.parse import unquote, urlparse

from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors import Sink
from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from pyflink.java_gateway import get_gateway
from pyflink.util.java_utils import to_jarray
from pyflink.version import __version__ as PYFLINK_VERSION

__all__ = [
    "PYFLINK_VERSION",
    "FlinkVersionMismatch",
    "kafka_rows_source",
    "offsetstore_sink",
    "store_offsets",
    "use_jars",
]

# The sink jar's manifest attributes (offsetstore.flink_integration.build writes them).
_MANIFEST_FLINK = "Offsetstore-Flink-Version"
_MANIFEST_KAFKA_CONNECTOR = "Offsetstore-Kafka-Connector-Version"


class FlinkVersionMismatch(RuntimeError):
    """The jars were built for another Flink than this PyFlink's; the message, one line, says what to install."""


def _manifest(path: str) -> dict[str, str]:
    with zipfile.ZipFile(path) as jar:
        try:
            text = jar.read("META-INF/MANIFEST.MF").decode()
        except KeyError:
            return {}
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def use_jars(env: StreamExecutionEnvironment, jars: str | Sequence[str]) -> None:
    """Adds offsetstore's jars to the job (``pipeline.jars``) after checking they match this PyFlink.

    ``jars`` is what ``python -m offsetstore.flink_integration --pyflink`` printed (``;``-separated
    file URLs) or a list of URLs or paths. Raises :class:`FlinkVersionMismatch` when the sink jar was
    built for another Flink minor version than apache-flink's, before anything runs.
    """
    parts = jars.split(";") if isinstance(jars, str) else list(jars)
    urls = [p if "://" in p else f"file://{p}" for p in (p.strip() for p in parts) if p]
    built_for = None
    for url in urls:
        found = _manifest(unquote(urlparse(url).path))
        if _MANIFEST_FLINK in found:
            built_for = found
    if built_for is None:
        raise FlinkVersionMismatch(
            "offsetstore: no offsetstore sink jar among the jars given; "
            "pass what `python -m offsetstore.flink_integration --pyflink` prints"
        )
    flink, connector = built_for[_MANIFEST_FLINK], built_for.get(_MANIFEST_KAFKA_CONNECTOR, "?")
    if _minor(flink) != _minor(PYFLINK_VERSION):
        raise FlinkVersionMismatch(
            f"offsetstore: the sink jar is built for Flink {flink} (flink-connector-kafka {connector}); "
            f"this PyFlink is apache-flink {PYFLINK_VERSION}: pip install apache-flink=={flink}"
        )
    env.add_jars(*urls)


def store_offsets(
    jdbc_url: str,
    group_id: str,
    *,
    user: str | None = None,
    password: str | None = None,
    fallback: str = "earliest",
    kafka_bootstrap_servers: str | None = None,
) -> KafkaOffsetsInitializer:
    """``KafkaSource``'s starting offsets from the group's stored offsets (``StoreOffsetsInitializer``).

    ``fallback`` (earliest, latest or fail) is where a partition the store has no offset for starts.
    With ``kafka_bootstrap_servers`` (the source's), a group bound to another Kafka cluster does not start.
    """
    of = get_gateway().jvm.offsetstore.flink.StoreOffsetsInitializer.of
    if kafka_bootstrap_servers is None:
        return KafkaOffsetsInitializer(of(jdbc_url, user, password, group_id, fallback))
    return KafkaOffsetsInitializer(of(jdbc_url, user, password, group_id, fallback, kafka_bootstrap_servers))


def kafka_rows_source(
    bootstrap_servers: str,
    topics: str | Sequence[str],
    starting_offsets: KafkaOffsetsInitializer,
    *,
    group_id: str | None = None,
    bounded: bool = False,
    properties: dict[str, str] | None = None,
) -> KafkaSource:
    """A ``KafkaSource`` of rows (topic STRING, partition INT, offset BIGINT, key STRING, value STRING).

    With ``bounded`` the job ends at the topics' end offsets as of its start. Offsets are never
    committed back to Kafka: the store holds them.
    """
    jvm = get_gateway().jvm
    names = [topics] if isinstance(topics, str) else list(topics)
    builder = (
        jvm.org.apache.flink.connector.kafka.source.KafkaSource.builder()
        .setBootstrapServers(bootstrap_servers)
        .setTopics(to_jarray(jvm.String, names))
        .setDeserializer(jvm.offsetstore.flink.KafkaRows())
        .setStartingOffsets(starting_offsets._j_initializer)
        .setProperty("commit.offsets.on.checkpoint", "false")
    )
    if group_id is not None:
        builder.setGroupId(group_id)
    for name, value in (properties or {}).items():
        builder.setProperty(name, value)
    if bounded:
        builder.setBounded(
            jvm.org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer.latest()
        )
    return KafkaSource(builder.build())


def offsetstore_sink(
    jdbc_url: str,
    group_id: str,
    table: str,
    columns: Sequence[str],
    *,
    user: str | None = None,
    password: str | None = None,
    member_id: str | None = None,
    properties: dict[str, str] | None = None,
    max_buffered_rows: int | None = None,
    kafka_bootstrap_servers: str | None = None,
) -> Sink:
    """The offsetstore sink of rows into ``table``'s ``columns`` (field i into column i): ``OffsetStoreSink.forRows``.

    The first three columns take the topic, partition and offset. Building it joins the group: this
    job is an attempt with a generation of its own, which fences every earlier attempt's writers.
    With ``kafka_bootstrap_servers`` (the source's) it binds the group to that Kafka cluster and
    stores the fingerprints of the last records at each flush (docs/flink.md, "Another Kafka cluster").
    """
    jvm = get_gateway().jvm
    builder = jvm.offsetstore.flink.OffsetStoreSink.forRows(table, to_jarray(jvm.String, list(columns)))
    builder.jdbcUrl(jdbc_url).groupId(group_id)
    for name, value in {"user": user, "password": password, **(properties or {})}.items():
        if value is not None:
            builder.property(name, value)
    if member_id is not None:
        builder.memberId(member_id)
    if max_buffered_rows is not None:
        builder.maxBufferedRows(max_buffered_rows)
    if kafka_bootstrap_servers is not None:
        builder.kafkaBootstrapServers(kafka_bootstrap_servers)
    return Sink(builder.build())
