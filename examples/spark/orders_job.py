"""Example: a Spark Structured Streaming job that copies a Kafka topic into PostgreSQL exactly once (docs/spark.md).

Usage, as a playground on one machine (no Kafka, no Maven: a local source of
Kafka-shaped records, ``offsetstore.spark_integration.testing.KafkaShapedSource``)::

    make run                                   # terminal 1: the store, on the embedded PostgreSQL
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/spark/orders_job.py \\
        --database-url 'postgresql+psycopg://postgres@/postgres?host=...'   # the URL make run logs

and against a real Kafka cluster (the connector comes from Maven, through ``spark.jars.packages``)::

    python examples/spark/orders_job.py --source kafka --bootstrap-servers kafka.internal:9092 \\
        --database-url postgresql://postgres@db.internal/offsets

It creates its table if missing (``public.orders_spark``, keyed by the Kafka
coordinates) and upserts on that key: a reset backwards re-delivers records on
purpose, and each then overwrites itself instead of failing on the key. Kill it any
way you like and run the same command again; after ``offsetstore groups reset
orders-spark ... --execute`` run it again too: it starts on a fresh checkpoint, from
the offsets the reset stored.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from offsetstore.spark_integration import (
    ExactlyOnceSink,
    KafkaConnectorError,
    WorkerEnvironmentError,
    check_kafka_connector,
    check_workers,
    checkpoint_location,
    kafka_connector,
    starting_offsets,
)
from offsetstore.storage.engine import create_engine

if TYPE_CHECKING:  # PySpark is the spark extra's: imported in main(), where its absence is said in one line
    from pyspark.sql import SparkSession

#: The exit code of a run that a reset, a delete or a newer run fenced (as the Kafka example's).
FENCED = 3
FENCED_HINT = (
    "group {group} moved on (a reset, a delete or a newer run of the job; `offsetstore groups history {group}` "
    "says which); nothing of the refused batch was written. Run the same command again to continue from "
    "the stored offsets on a fresh checkpoint"
)

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
TABLE_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    key             bytea,
    value           bytea,
    topic           text        NOT NULL,
    "partition"     integer     NOT NULL,
    "offset"        bigint      NOT NULL,
    "timestamp"     timestamptz,
    "timestampType" integer,
    PRIMARY KEY (topic, "partition", "offset")
)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", default=os.environ.get("OFFSETSTORE_DATABASE_URL"), help="the store's database")
    p.add_argument("--source", choices=["local", "kafka"], default="local")
    p.add_argument("--bootstrap-servers", help="Kafka's, for --source kafka")
    p.add_argument("--group", default="orders-spark")
    p.add_argument("--topic", default="orders-spark")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--table", default="public.orders_spark")
    p.add_argument("--records", type=int, default=1_000_000, help="--source local: records per partition")
    p.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    p.add_argument("--checkpoint-base", default="checkpoints")
    p.add_argument("--until-caught-up", action="store_true", help="stop at the end of the data (availableNow)")
    p.add_argument("--quiet", action="store_true", help="no progress line per batch (the log keeps it)")
    args = p.parse_args()
    if not args.database_url:
        p.error("--database-url (or OFFSETSTORE_DATABASE_URL) is required")
    try:
        from pyspark.errors import PySparkRuntimeError, StreamingQueryException
        from pyspark.sql import SparkSession
    except ModuleNotFoundError:
        # `make run` installs the server only: name the extra rather than end in a traceback.
        print(
            f"PySpark is not installed in {sys.executable}: install the spark extra into it "
            "(from the checkout: .venv/bin/pip install -e '.[spark]'; see docs/spark.md)",
            file=sys.stderr,
        )
        return 2

    # The sink logs one line per batch on logger offsetstore.spark_integration.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    # The store's engine factory reads the URL as libpq does (a multi-host URL too).
    engine = create_engine(args.database_url, pool_size=None)
    with engine.begin() as conn:
        conn.exec_driver_sql(TABLE_DDL.format(table=args.table))
    engine.dispose()

    builder = SparkSession.builder.appName(args.group)
    if args.source == "kafka":
        # Spark's Kafka connector of PySpark's own version, from Maven (docs/spark.md, "Versions").
        builder = builder.config("spark.jars.packages", kafka_connector())
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as error:
        if args.source != "kafka" or error.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        # Spark's JVM printed Ivy's report and its own trace above, then exited before Spark started.
        print(
            f"Spark did not start: when the lines above say 'unresolved dependency', Maven Central serves no "
            f"{kafka_connector()} (Spark's Kafka connector must be of PySpark's version, and none is published "
            "for some releases) or cannot be reached; install the tested pair: pip install 'pyspark==4.2.0' "
            "(docs/spark.md, 'Versions')",
            file=sys.stderr,
        )
        return 2
    spark.sparkContext.setLogLevel("WARN")
    _quiet_fence_traces(spark)
    try:
        # Before anything runs on the workers (the local source does): one clear line if
        # they cannot import offsetstore, instead of a task's traceback; and one if Spark's
        # Kafka connector is missing or of another Spark version (spark-submit --packages).
        check_workers(spark)
        if args.source == "kafka":
            check_kafka_connector(spark)
    except (WorkerEnvironmentError, KafkaConnectorError) as error:
        print(error, file=sys.stderr)
        return 2

    start = starting_offsets(args.database_url, args.group, {args.topic: args.partitions})
    if args.source == "kafka":
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("includeHeaders", "true")  # the records' headers: part of each batch's fingerprint
        )
    else:
        from offsetstore.spark_integration.testing import KafkaShapedSource

        spark.dataSource.register(KafkaShapedSource)
        reader = (
            spark.readStream.format("kafka_shaped")
            .option("partitions", args.partitions)
            .option("records", args.records)
        )
    df = (
        reader.option("subscribe", args.topic)
        .option("startingOffsets", start)
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .load()
    )
    sink = ExactlyOnceSink(
        args.database_url,
        group_id=args.group,
        table=args.table,
        mode="upsert",
        key_columns=("topic", "partition", "offset"),
        columns=COLUMNS,  # the table's: not the headers
        # Binds the group to the Kafka cluster it reads: a run against another is refused (docs/spark.md).
        bootstrap_servers=args.bootstrap_servers if args.source == "kafka" else None,
        progress=not args.quiet,
    )
    writer = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint_location(args.database_url, args.group, args.checkpoint_base))
        .queryName(args.group)
    )
    query = (writer.trigger(availableNow=True) if args.until_caught_up else writer).start()
    print(f"started: group {args.group}, topic {args.topic}, from {start}", flush=True)
    try:
        query.awaitTermination()
    except StreamingQueryException as error:
        if "StaleGenerationError" not in str(error):
            raise
        # A batch was refused: nothing of it was written. Say so in one line, not in Spark's traces.
        print(f"fenced: {FENCED_HINT.format(group=args.group)}", file=sys.stderr, flush=True)
        return FENCED
    if not args.until_caught_up:
        # A query that waits for more ends only when the sink's idle watch stopped it (it logged why).
        print(f"stopped: {FENCED_HINT.format(group=args.group)}", file=sys.stderr, flush=True)
        return FENCED
    print("caught up", flush=True)
    return 0


def _quiet_fence_traces(spark: SparkSession) -> None:
    """Leaves a fenced batch to the one line above: py4j and Spark would each log it with a stack trace.

    Any other failure still ends in awaitTermination's exception, which carries the same cause.
    Stopping an idle query makes the scheduler warn that it had no job to cancel: noise too.
    """
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    jvm = spark.sparkContext._jvm
    level, configurator = jvm.org.apache.logging.log4j.Level, jvm.org.apache.logging.log4j.core.config.Configurator
    configurator.setLevel("org.apache.spark.sql.execution.streaming", level.OFF)
    configurator.setLevel("org.apache.spark.scheduler.DAGScheduler", level.ERROR)


if __name__ == "__main__":
    sys.exit(main())
