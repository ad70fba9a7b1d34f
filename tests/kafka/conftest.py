"""The Kafka tests' fixtures, from ``tests/fixtures/fix_kafka.py``: a conftest's fixtures serve its directory only."""

import pytest

pytest.importorskip("confluent_kafka", reason="the kafka extra (confluent-kafka) is not installed")

from tests.fixtures.fix_kafka import broker, make_table, make_topic  # noqa: E402
from tests.fixtures.fix_pg_cluster import restartable_postgres  # noqa: E402
from tests.fixtures.fix_spark import jdk, kafka_connector_jars, spark  # noqa: E402  (the mirror's Spark test)

__all__ = ["broker", "jdk", "kafka_connector_jars", "make_table", "make_topic", "restartable_postgres", "spark"]
