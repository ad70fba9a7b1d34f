"""The Spark tests' fixtures, from ``tests/fixtures/fix_spark.py``: a conftest's fixtures serve its directory only."""

from tests.fixtures.fix_pg_cluster import sync_cluster
from tests.fixtures.fix_spark import cluster_work_dirs, jdk, kafka_connector_jars, make_table, spark

__all__ = ["cluster_work_dirs", "jdk", "kafka_connector_jars", "make_table", "spark", "sync_cluster"]
