"""Exactly-once Spark Structured Streaming into PostgreSQL, with the offsets kept in the offset store.

PySpark and pyarrow (the ``spark`` extra) are imported only when a batch is written;
importing this package needs neither. The testing helper
:mod:`offsetstore.spark_integration.testing` (a Kafka-shaped streaming source) is not
imported here.
"""

from offsetstore.spark_integration.kafka_connector import KafkaConnectorError, check_kafka_connector, kafka_connector
from offsetstore.spark_integration.offsets import checkpoint_location, starting_offsets
from offsetstore.spark_integration.sink import ExactlyOnceSink, Mode, WritePath
from offsetstore.spark_integration.workers import WorkerEnvironmentError, check_workers

__all__ = [
    "ExactlyOnceSink",
    "KafkaConnectorError",
    "Mode",
    "WorkerEnvironmentError",
    "WritePath",
    "check_kafka_connector",
    "check_workers",
    "checkpoint_location",
    "kafka_connector",
    "starting_offsets",
]
