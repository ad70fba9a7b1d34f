"""Change data capture with Debezium (pydbzengine) whose positions live in the offset store, exactly once.

Needs the ``debezium`` extra and a JDK 17+ with ``javac``. The Java ``OffsetBackingStore``
(``java/OffsetStoreBackingStore.java``, class :data:`STORE_CLASS`) gives Kafka Connect's runtime
the positions the store holds; :class:`ChangeWriter` writes each source transaction's change
rows and its position in one PostgreSQL transaction; :class:`CaptureRunner` runs the engine,
fenced by a generation, and restarts it after an operator's reset. See docs/connect.md.
"""

from offsetstore.connect_integration.capture import (
    STORE_CLASS,
    CaptureRunner,
    capture_log_dir,
    debezium_jars,
    engine_properties,
    store_classpath,
)
from offsetstore.connect_integration.handler import CHANGE_COLUMNS, ChangeWriter, Delivery, change_table_sql
from offsetstore.connect_integration.positions import format_lsn, jdbc_url, parse_lsn, position_of, topic_of

__all__ = [
    "CHANGE_COLUMNS",
    "STORE_CLASS",
    "CaptureRunner",
    "ChangeWriter",
    "capture_log_dir",
    "Delivery",
    "change_table_sql",
    "debezium_jars",
    "engine_properties",
    "format_lsn",
    "jdbc_url",
    "parse_lsn",
    "position_of",
    "store_classpath",
    "topic_of",
]
