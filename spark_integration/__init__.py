"""Exactly-once Spark Structured Streaming into PostgreSQL, with the offsets kept in the offset store.

:func:`observe` watches a query that keeps its own positions instead: each finished batch's
Kafka end offsets become an observed group's positions, and the query is left untouched.

PySpark and pyarrow (the ``spark`` extra) are imported only when a batch is written;
importing this package needs neither. The testing helper
:mod:`offsetstore.spark_integration.testing` (a Kafka-shaped streaming source) is not
imported here.
"""

from offsetstore.spark_integration.kafka_connector import KafkaConnectorError, check_kafka_connector, kafka_connector
from offsetstore.spark_integration.observer import SparkObserver, observe, starting_offsets_at
from offsetstore.spark_integration.offsets import checkpoint_location, starting_offsets
from offsetstore.spark_integration.sink import ExactlyOnceSink, Mode, WritePath
from offsetstore.spark_integration.workers import WorkerEnvironmentError, check_workers

__all__ = [
    "ExactlyOnceSink",
    "KafkaConnectorError",
    "Mode",
    "SparkObserver",
    "WorkerEnvironmentError",
    "WritePath",
    "check_kafka_connector",
    "check_workers",
    "checkpoint_location",
    "kafka_connector",
    "observe",
    "starting_offsets",
    "starting_offsets_at",
]
