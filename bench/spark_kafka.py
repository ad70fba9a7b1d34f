"""Spark's own Kafka source on Apache Kafka into PostgreSQL: the exactly-once sink against Spark's plain JDBC writer, same run.

One topic on a local Apache Kafka broker (``offsetstore.kafka_integration.local_kafka``),
read from its start by the same query (``format("kafka")``, ``availableNow``,
``maxOffsetsPerTrigger``), interleaved per repeat so that a noisy neighbour slows both alike:

- ``jdbc``: foreachBatch appends each batch with Spark's JDBC writer
  (``DataFrame.write.jdbc``, PostgreSQL's JDBC driver): at least once, no offsets stored;
- ``offsetstore``: :class:`ExactlyOnceSink` (rows and offsets in one transaction), as
  the guide runs it: bound to the broker's cluster (``bootstrap_servers``) and storing the
  fingerprint of the record before each committed offset (issue 58);
- ``offsetstore-nofp``: the same sink with ``fingerprints=False`` and no binding.

Printed: each variant's median records/s of the whole query (what a user sees), and the
ratios offsetstore / jdbc and offsetstore-nofp / jdbc (above 1: the exactly-once sink is the
faster). Not a pass/fail test.

    python bench/spark_kafka.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        [--records 300000] [--partitions 4] [--per-trigger 100000] [--repeats 3]

The JDBC driver is Debian's ``/usr/share/java/postgresql.jar`` (libpostgresql-jdbc-java)
where present, else ``org.postgresql:postgresql`` from Maven Central (fetched once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import sqlalchemy as sa  # noqa: E402

from offsetstore.kafka_integration.local_kafka import KafkaCluster  # noqa: E402
from offsetstore.kafka_integration.maven import maven_classpath  # noqa: E402
from offsetstore.runtime import migrate  # noqa: E402
from offsetstore.spark_integration import ExactlyOnceSink, kafka_connector  # noqa: E402

DEBIAN_JDBC = Path("/usr/share/java/postgresql.jar")
MAVEN_JDBC = "org.postgresql:postgresql:42.7.7"
TABLE_DDL = """
CREATE TABLE {name} (key bytea, value bytea, topic text NOT NULL, "partition" integer NOT NULL,
                     "offset" bigint NOT NULL, "timestamp" timestamptz, "timestampType" integer)
"""
VARIANTS = ("jdbc", "offsetstore", "offsetstore-nofp")


def jdbc_jar() -> str:
    if DEBIAN_JDBC.is_file():
        return str(DEBIAN_JDBC)
    return maven_classpath([MAVEN_JDBC], name="postgresql-jdbc")[0]


def jdbc_target(url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and properties of a SQLAlchemy/libpq URL with a TCP host."""
    parsed = sa.make_url(url)
    if not parsed.host or parsed.host.startswith("/"):
        raise SystemExit("the JDBC writer needs a TCP database URL (host:port), not a Unix socket")
    props = {"user": parsed.username or "postgres", "driver": "org.postgresql.Driver"}
    if parsed.password:
        props["password"] = parsed.password
    return f"jdbc:postgresql://{parsed.host}:{parsed.port or 5432}/{parsed.database}", props


def produce(cluster: KafkaCluster, topic: str, partitions: int, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.producer_config(**{"linger.ms": 50, "batch.size": 1_000_000}))
    value = b"x" * 100
    for n in range(records):
        while True:
            try:
                producer.produce(topic, key=str(n).encode(), value=value, partition=n % partitions)
                break
            except BufferError:  # librdkafka's queue is full: let it send
                producer.poll(1)
    assert producer.flush(120) == 0


def run_once(
    spark, variant: str, url: str, engine: sa.Engine, bootstrap: str, topic: str, per_trigger: int, work: Path
):
    """One query over the whole topic; returns (seconds, rows written)."""
    table = f"public.bench_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(TABLE_DDL.format(name=table))
    if variant == "jdbc":
        jdbc_url, props = jdbc_target(url)

        def write(df, batch_id: int) -> None:
            df.write.jdbc(jdbc_url, table, mode="append", properties=props)
    elif variant == "offsetstore":
        group = f"bench-{uuid.uuid4().hex[:8]}"
        write = ExactlyOnceSink(url, group_id=group, table=table, progress=False, bootstrap_servers=bootstrap)
    else:
        group = f"bench-{uuid.uuid4().hex[:8]}"
        write = ExactlyOnceSink(url, group_id=group, table=table, progress=False, fingerprints=False)
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
    )
    checkpoint = work / f"checkpoint-{uuid.uuid4().hex}"
    started = time.perf_counter()
    query = df.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    query.start().awaitTermination()
    elapsed = time.perf_counter() - started
    with engine.begin() as conn:
        rows = conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one()
        conn.exec_driver_sql(f"DROP TABLE {table}")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return elapsed, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default=os.environ.get("OFFSETSTORE_DATABASE_URL"), required=False)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--per-trigger", type=int, default=100_000, help="maxOffsetsPerTrigger")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    if not args.database_url:
        p.error("--database-url (a TCP URL, for the JDBC writer) is required")
    url = migrate.normalize_url(args.database_url)
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    work = Path(tempfile.mkdtemp(prefix="offsetstore-bench-"))
    from pyspark.sql import SparkSession

    with KafkaCluster(1, heap="1g") as kafka:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, args.partitions)
        produce(kafka, topic, args.partitions, args.records)
        spark = (
            SparkSession.builder.master(args.master)
            .appName("offsetstore-bench-kafka")
            .config("spark.jars.packages", kafka_connector())
            .config("spark.jars", jdbc_jar())
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.local.dir", str(work / "local"))
            .config("spark.sql.warehouse.dir", str(work / "warehouse"))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            print(f"warming up (master {args.master}, {args.records:,} records, {args.partitions} partitions) ...")
            for variant in VARIANTS:
                run_once(spark, variant, url, engine, kafka.bootstrap, topic, args.per_trigger, work)
            rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(args.repeats):
                for variant in VARIANTS:
                    seconds, rows = run_once(
                        spark, variant, url, engine, kafka.bootstrap, topic, args.per_trigger, work
                    )
                    assert rows == args.records, f"{variant} wrote {rows} of {args.records} records"
                    rates[variant].append(rows / seconds)
            print(f"{'variant':<18}{'records/s (median)':>20}   runs")
            for variant in VARIANTS:
                runs = ", ".join(f"{r:,.0f}" for r in rates[variant])
                print(f"{variant:<18}{median(rates[variant]):>20,.0f}   {runs}")
            for variant in VARIANTS[1:]:
                ratio = median(rates[variant]) / median(rates["jdbc"])
                print(f"{variant} (exactly once) / Spark JDBC writer (at least once): {ratio:.2f}")
        finally:
            spark.stop()
            engine.dispose()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
