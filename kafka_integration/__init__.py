"""Plain Kafka consumers (confluent-kafka) with positions, exactly-once writes and lag from the offset store.

Needs the ``kafka`` extra. :class:`StoredPositions` starts assigned partitions at the
stored offsets; :class:`ExactlyOnceWriter` writes a batch's rows and its offsets in one
PostgreSQL transaction; :class:`AtLeastOnceCommitter` commits over gRPC after the
application's own sink; :class:`WatermarkReporter` reports log start and end for lag.
"""

from offsetstore.kafka_integration.committer import AtLeastOnceCommitter, next_offsets
from offsetstore.kafka_integration.positions import StoredPositions, consumer_config
from offsetstore.kafka_integration.watermarks import WatermarkReporter, consumer_watermarks
from offsetstore.kafka_integration.writer import ExactlyOnceWriter

__all__ = [
    "AtLeastOnceCommitter",
    "ExactlyOnceWriter",
    "StoredPositions",
    "WatermarkReporter",
    "consumer_config",
    "consumer_watermarks",
    "next_offsets",
]
