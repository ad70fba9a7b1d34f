"""Flink exactly once into PostgreSQL without XA: the Java sink and offsets initializer, built and run from Python.

The sink (``offsetstore.flink.OffsetStoreSink``, Flink's Sink V2) writes a checkpoint's rows and
their Kafka positions in one PostgreSQL transaction through the SQL API (docs/sql.md); the
initializer (``offsetstore.flink.StoreOffsetsInitializer``) starts ``KafkaSource`` at the group's
stored offsets. Both are Java, shipped here as source and compiled once against Flink's jars from
Maven Central (:mod:`.build`). See docs/flink.md.
"""

from offsetstore.flink_integration.build import (
    FLINK_VERSION,
    JDBC_CONNECTOR_VERSION,
    KAFKA_CONNECTOR_VERSION,
    POSTGRESQL_JDBC_VERSION,
    compile_java,
    flink_classpath,
    pyflink_jars,
    sink_classpath,
    sink_jar,
)

__all__ = [
    "FLINK_VERSION",
    "JDBC_CONNECTOR_VERSION",
    "KAFKA_CONNECTOR_VERSION",
    "POSTGRESQL_JDBC_VERSION",
    "compile_java",
    "flink_classpath",
    "pyflink_jars",
    "sink_classpath",
    "sink_jar",
]
