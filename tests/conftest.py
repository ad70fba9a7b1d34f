"""The suite's plugins: the fixtures every test directory shares, from ``tests/fixtures``.

The Spark and Kafka fixtures are not among them: both directories name their sink
table fixture ``make_table`` with columns of their own, so each directory's conftest
takes its fixtures from ``fix_spark`` or ``fix_kafka`` and they stay below it.
"""

import os
from pathlib import Path

import pytest

# Every Spark driver the tests start reads the session's spark-defaults.conf (why: its comments).
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "fixtures" / "spark-conf"))

# Before any of them is imported: their asserts then report as a test's own do.
pytest.register_assert_rewrite("tests.fixtures")

pytest_plugins = [
    "tests.fixtures.scheduling",
    "tests.fixtures.fix_db",
    "tests.fixtures.fix_sql_roles",
    "tests.fixtures.fix_server",
    "tests.fixtures.fix_auth",
    "tests.fixtures.fix_http",
    "tests.fixtures.fix_console",
    "tests.fixtures.fix_tenants",
    "tests.fixtures.fix_cli",
    "tests.fixtures.fix_metrics",
    "tests.fixtures.fix_apache_kafka",
    "tests.fixtures.fix_mirror_maker",
    "tests.fixtures.fix_flink",
    "tests.fixtures.fix_pyflink",
    "tests.fixtures.fix_flink_cluster",
]
