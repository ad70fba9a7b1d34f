"""Spark sink benchmark: the exactly-once sink's write paths against a plain at-least-once COPY, same data, same run.

For each batch size the same pipeline (a Kafka-shaped source, ``availableNow``, the
Kafka columns written as they come) runs once per variant and repeat, interleaved so
that a noisy neighbour slows every variant alike:

- ``plain driver``: foreachBatch collects the batch as Arrow and COPYs it into the
  table, no offsets, no transaction around it (at-least-once);
- ``plain executors``: every task COPYs its partition straight into the table;
- ``exactly-once driver`` / ``exactly-once executors``: :class:`ExactlyOnceSink`;
- ``exactly-once auto``: the sink's default, which collects at most
  ``executor_threshold + 1`` rows of each batch (a ``limit``) to decide its path;
  compared with ``plain driver`` (below the threshold it writes from the driver) and
  with ``exactly-once driver`` (the price of the bound).

Printed per variant: rows/s of the whole query (what a user sees) and of the time
spent inside foreachBatch (the sink alone), and the ratio exactly-once / plain of
the same write path (1.0 = free; the aim is above 0.9). Not a pass/fail test.

    python bench/spark_sink.py [--database-url URL] [--batch-sizes 10000,100000] [--batches 3] [--repeats 2]

Without a URL (or ``OFFSETSTORE_DATABASE_URL``) it starts an embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from statistics import median

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import psycopg  # noqa: E402
import pyarrow as pa  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from offsetstore.runtime import migrate
from offsetstore.sink import arrow_copy
from offsetstore.sink import sql as sink_sql
from offsetstore.sink.sql import TableName
from offsetstore.spark_integration import ExactlyOnceSink  # noqa: E402
from offsetstore.storage.engine import libpq_conninfo

PARTITIONS = 4
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
TABLE_DDL = """
CREATE TABLE {name} (key bytea, value bytea, topic text, "partition" integer, "offset" bigint,
                     "timestamp" timestamptz, "timestampType" integer)
"""


class Timed:
    """A foreachBatch function that adds up the time spent inside ``fn``."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        self.fn(df, batch_id)
        self.seconds += time.perf_counter() - started


def plain_driver(conninfo: str, table: TableName) -> Callable:
    """At-least-once baseline of the driver path: Arrow to COPY, autocommitted, no offsets."""

    def write(df, batch_id: int) -> None:
        data = df.toArrow()
        with psycopg.connect(conninfo, autocommit=True) as conn, conn.cursor() as cur:
            arrow_copy.copy_batches(cur, sink_sql.copy_into(table, COLUMNS), data.select(COLUMNS).to_batches())

    return write


def _copy_partition(conninfo: str, table: TableName, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.cursor() as cur:
        rows = arrow_copy.copy_batches(cur, sink_sql.copy_into(table, COLUMNS), batches)
    yield pa.record_batch({"rows": pa.array([rows], pa.int64())})


def plain_executors(conninfo: str, table: TableName) -> Callable:
    """At-least-once baseline of the executors' path: each task COPYs its partition into the table."""

    def write(df, batch_id: int) -> None:
        df.mapInArrow(lambda batches: _copy_partition(conninfo, table, batches), "rows long").collect()

    return write


def run_once(
    spark, url: str, engine: sa.Engine, variant: str, batch_size: int, batches: int, work: Path
) -> tuple[float, float, int]:
    """One query over ``batch_size * batches`` records; returns (query seconds, sink seconds, rows)."""
    table = TableName("public", f"bench_{uuid.uuid4().hex[:10]}")
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(TABLE_DDL.format(name=table.regclass()))
    conninfo = libpq_conninfo(url)
    if variant == "plain driver":
        fn = plain_driver(conninfo, table)
    elif variant == "plain executors":
        fn = plain_executors(conninfo, table)
    else:
        path = variant.split()[-1]
        fn = ExactlyOnceSink(url, group_id=f"bench-{uuid.uuid4().hex[:8]}", table=str(table), write_path=path)
    timed = Timed(fn)
    df = (
        spark.readStream.format("kafka_shaped")
        .option("subscribe", topic)
        .option("partitions", PARTITIONS)
        .option("records", batch_size * batches // PARTITIONS)
        .option("maxOffsetsPerTrigger", batch_size)
        .load()
    )
    checkpoint = work / f"checkpoint-{uuid.uuid4().hex}"
    started = time.perf_counter()
    query = (
        df.writeStream.foreachBatch(timed)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    with engine.begin() as conn:
        rows = conn.exec_driver_sql(f"SELECT count(*) FROM {table.regclass()}").scalar_one()
        conn.exec_driver_sql(f"DROP TABLE {table.regclass()}")
        for stage in (
            conn.exec_driver_sql(
                "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' AND starts_with(tablename, %(p)s)",
                {"p": table.name + "_offsetstore_stage_"},
            )
            .scalars()
            .all()
        ):
            conn.exec_driver_sql(f"DROP TABLE public.{stage}")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return elapsed, timed.seconds, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default=os.environ.get("OFFSETSTORE_DATABASE_URL"))
    p.add_argument("--batch-sizes", default="10000,50000,200000", help="records per micro-batch, comma-separated")
    p.add_argument("--batches", type=int, default=3, help="micro-batches per query")
    p.add_argument("--repeats", type=int, default=2, help="runs per variant and size; the median is printed")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    variants = ["plain driver", "exactly-once driver", "exactly-once auto", "plain executors", "exactly-once executors"]

    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="offsetstore-bench-"))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        url = args.database_url
        if not url:
            from offsetstore.runtime.embedded import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres(work / "pgdata")).url
        url = migrate.normalize_url(url)
        migrate.upgrade(url)
        engine = sa.create_engine(url)
        stack.callback(engine.dispose)

        from pyspark.sql import SparkSession

        from offsetstore.spark_integration.testing import KafkaShapedSource

        spark = (
            SparkSession.builder.master(args.master)
            .appName("offsetstore-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.warehouse.dir", str(work / "warehouse"))
            .config("spark.local.dir", str(work / "local"))
            .getOrCreate()
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(KafkaShapedSource)

        print(f"warming up (master {args.master}, {PARTITIONS} partitions) ...", flush=True)
        for variant in variants:
            run_once(spark, url, engine, variant, 2000, 2, work)

        print(
            f"{'batch':>8}  {'variant':<24}{'rows/s query':>14}{'rows/s sink':>13}{'ratio query':>13}{'ratio sink':>12}"
        )
        for size in sizes:
            results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
            for _ in range(args.repeats):
                for variant in variants:
                    query_s, sink_s, rows = run_once(spark, url, engine, variant, size, args.batches, work)
                    assert rows == size * args.batches // PARTITIONS * PARTITIONS, f"{variant} wrote {rows} rows"
                    results[variant].append((rows / query_s, rows / sink_s))
            for variant in variants:
                q = median(r[0] for r in results[variant])
                s = median(r[1] for r in results[variant])
                ratio = ""
                if variant.startswith("exactly-once"):
                    path = variant.split()[-1]
                    base = results["plain " + ("driver" if path == "auto" else path)]
                    ratio = f"{q / median(r[0] for r in base):>13.2f}{s / median(r[1] for r in base):>12.2f}"
                    if path == "auto":
                        driver = results["exactly-once driver"]
                        ratio += f"   vs exactly-once driver: {q / median(r[0] for r in driver):.2f}"
                print(f"{size:>8}  {variant:<24}{q:>14,.0f}{s:>13,.0f}{ratio}", flush=True)


if __name__ == "__main__":
    main()
