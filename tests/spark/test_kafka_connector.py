"""Spark's Kafka connector of the wrong version, or none: one line saying what to set, never a JVM stack trace."""

from __future__ import annotations

import pytest

from offsetstore.spark_integration import KafkaConnectorError, check_kafka_connector, kafka_connector
from offsetstore.spark_integration.kafka_connector import connector_problem

IVY_JAR = "/root/.ivy2.5.2/jars/org.apache.spark_spark-sql-kafka-0-10_2.13-{}.jar"


def test_the_coordinate_follows_the_installed_pyspark() -> None:
    import pyspark

    assert kafka_connector() == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    assert kafka_connector("4.2.0") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


def test_a_connector_of_another_spark_version_is_one_line_naming_the_right_one() -> None:
    assert connector_problem("4.2.0", IVY_JAR.format("4.2.0")) is None
    problem = connector_problem("4.3.0", IVY_JAR.format("4.2.0"))
    assert problem is not None and "\n" not in problem
    assert "version 4.2.0" in problem and "Spark is 4.3.0" in problem
    assert problem.endswith("use org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0")


def test_a_missing_connector_names_the_package_to_add() -> None:
    problem = connector_problem("4.2.0", None)
    assert problem is not None and "\n" not in problem
    assert "spark.jars.packages" in problem and problem.endswith("org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0")


@pytest.mark.spark
def test_the_session_with_the_guides_package_passes_the_check(kafka_connector_jars, spark) -> None:
    check_kafka_connector(spark)  # raises KafkaConnectorError on a mismatch
    jvm = spark.sparkContext._jvm
    found = jvm.org.apache.spark.util.Utils.classForName(
        "org.apache.spark.sql.kafka010.KafkaSourceProvider", False, False
    )
    jar = found.getProtectionDomain().getCodeSource().getLocation().getPath()
    assert jar.endswith(f"spark-sql-kafka-0-10_2.13-{spark.version}.jar"), jar
    assert issubclass(KafkaConnectorError, RuntimeError)
