"""Spark's Kafka source (the ``spark-sql-kafka-0-10`` connector): its Maven coordinate and a check of its version.

The connector is not part of PySpark; it comes from Maven (``spark.jars.packages`` or
``spark-submit --packages``) and must be of Spark's own version: another one fails deep in
the JVM (``NoSuchMethodError``, ``ClassNotFoundException``) when the query starts.
:func:`check_kafka_connector` says so in one line before that.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KafkaConnectorError", "check_kafka_connector", "connector_problem", "kafka_connector"]

#: The connector's artifact, for Spark's default Scala 2.13.
ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"

#: The class behind ``format("kafka")``.
PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

_JAR_VERSION = re.compile(r"spark-sql-kafka-0-10_2\.1\d-(\d[^/]*?)\.jar$")


class KafkaConnectorError(RuntimeError):
    """Spark's Kafka connector is missing or of another version than Spark; the message says what to set."""


def kafka_connector(spark_version: str | None = None) -> str:
    """The connector's Maven coordinate for ``spark_version`` (default: the installed PySpark's).

    Parameters
    ----------
    spark_version : str, optional
        Spark's version, e.g. ``"4.2.0"``; PySpark's ``__version__`` when left out.

    Returns
    -------
    str
        ``org.apache.spark:spark-sql-kafka-0-10_2.13:<version>``, for ``spark.jars.packages``.
    """
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return f"{ARTIFACT}:{spark_version}"


def connector_problem(spark_version: str, connector_jar: str | None) -> str | None:
    """Why the connector at ``connector_jar`` cannot serve Spark ``spark_version``; None when it can.

    ``connector_jar`` is the path of the jar that holds the provider class, None when the
    class is not on the classpath at all.
    """
    wanted = kafka_connector(spark_version)
    if connector_jar is None:
        return (
            f"Spark's Kafka source is not on this session's classpath: set spark.jars.packages "
            f"(or spark-submit --packages) to {wanted}"
        )
    found = _JAR_VERSION.search(connector_jar)
    if found is None or found[1] == spark_version:
        return None  # a jar of another name (a shaded build, an assembly): nothing to compare
    return (
        f"Spark's Kafka connector is version {found[1]} ({connector_jar}) but Spark is {spark_version}: "
        f"the two must match; use {wanted}"
    )


def check_kafka_connector(spark: SparkSession) -> None:
    """Raises :class:`KafkaConnectorError`, one line, when the session cannot run ``format("kafka")`` as it is.

    Parameters
    ----------
    spark : SparkSession
        A classic session (a Spark Connect client has no JVM of its own here: nothing is checked).

    Notes
    -----
    It looks for the connector's provider class in the driver's JVM and compares the
    version in its jar's name with ``spark.version``. A connector of another version
    otherwise fails when the query starts, with a JVM stack trace.
    """
    context = getattr(spark, "_sc", None)
    jvm = getattr(context, "_jvm", None)
    if jvm is None:
        return
    jar: str | None
    try:
        found = jvm.org.apache.spark.util.Utils.classForName(PROVIDER, False, False)
    except Exception:  # py4j's Py4JJavaError: ClassNotFoundException
        jar = None
    else:
        source = found.getProtectionDomain().getCodeSource()
        jar = str(source.getLocation().getPath()) if source is not None else ""
    problem = connector_problem(spark.version, jar)
    if problem:
        raise KafkaConnectorError(problem)
