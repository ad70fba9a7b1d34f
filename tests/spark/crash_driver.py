"""One run of a test pipeline in a process of its own, which SIGKILLs itself (or an executor) at a chosen point.

Run by the crash and cluster tests (``test_crash.py``, ``test_cluster.py``): the driver
dies as a machine would, with no exception handler, no finally block and no clean JVM
shutdown, and the next run starts on whatever it left behind. Also run by
``spark-submit`` (``--master`` left out, so spark-submit's applies).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from offsetstore.spark_integration import ExactlyOnceSink, _faults, starting_offsets
from offsetstore.spark_integration.testing import KillExecutorOnce

# The repository's root, as pytest sets it, for the tests' own Spark setup.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fixtures.fix_spark import MASTER, build_spark, kafka_stream  # noqa: E402
from tests.fixtures.fix_spark_kafka import kafka_source  # noqa: E402


def rate_stream(spark, topic: str, partitions: int, per_trigger: int):
    """Kafka-shaped rows from Spark's JVM-only ``rate-micro-batch`` source: row n is offset n // P of partition n % P."""
    from pyspark.sql import functions as F

    df = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", per_trigger).load()
    return df.select(
        F.lit(topic).alias("topic"),
        (F.col("value") % partitions).cast("int").alias("partition"),
        F.expr(f"value div {partitions}").alias("offset"),
        F.col("timestamp"),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--database-url", required=True)
    p.add_argument("--group-id", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--max-offsets-per-trigger", type=int, required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--workdir", required=True, help="Spark's own files (warehouse, scratch)")
    p.add_argument("--write-path", choices=["driver", "executors", "auto"], required=True)
    p.add_argument("--master", help="Spark's master; default: the tests' MASTER; 'submit': spark-submit's")
    p.add_argument(
        "--source",
        choices=["kafka_shaped", "rate"],
        default="kafka_shaped",
        help="rate: Spark's JVM source, so that no Python runs on the workers before the sink",
    )
    p.add_argument("--from-store", action="store_true", help="startingOffsets from the offset store")
    p.add_argument("--bootstrap", help="kafka_shaped: Spark's own Kafka source on this broker instead of the stand-in")
    p.add_argument("--starting-offsets", help="startingOffsets as given (earliest, latest or JSON)")
    p.add_argument("--crash-stage", help="the sink's stage at which to die")
    p.add_argument("--crash-batch", type=int, help="the batch id at which to die")
    p.add_argument("--kill-executor-at", help="a staging task's stage at which its executor JVM is killed, once")
    p.add_argument("--marker-dir", help="where the executor kill leaves its marker")
    p.add_argument("--batches", type=int, default=3, help="rate source: stop after this many committed batches")
    args = p.parse_args()

    master = None if args.master == "submit" else args.master or MASTER
    spark = build_spark("offsetstore-crash-test", Path(args.workdir), master=master, kafka=args.bootstrap is not None)
    print(f"master {spark.sparkContext.master}", flush=True)
    sink = ExactlyOnceSink(args.database_url, args.group_id, args.table, write_path=args.write_path)
    committed: list[int] = []
    enough = threading.Event()

    def hook(stage: str, batch_id: int) -> None:
        if stage == args.crash_stage and batch_id == args.crash_batch:
            print(f"crashing at {stage} of batch {batch_id}", flush=True)
            # The whole process group: this interpreter and its JVM (and local-cluster's executors), at once.
            os.killpg(os.getpgrp(), signal.SIGKILL)
        if stage == "committed":
            committed.append(batch_id)
            if len(committed) >= args.batches:
                enough.set()

    kill = KillExecutorOnce(args.kill_executor_at, args.marker_dir) if args.kill_executor_at else None
    with _faults.installed(driver=hook, task=kill):
        if args.source == "rate":
            df = rate_stream(spark, args.topic, args.partitions, args.max_offsets_per_trigger)
            trigger = {"processingTime": "1 second"}
        else:
            options = {"maxOffsetsPerTrigger": args.max_offsets_per_trigger}
            if args.starting_offsets:
                options["startingOffsets"] = args.starting_offsets
            if args.from_store:
                options["startingOffsets"] = starting_offsets(
                    args.database_url, args.group_id, {args.topic: args.partitions}
                )
            if args.bootstrap:
                df = kafka_source(spark, args.bootstrap, args.topic, **options)
            else:
                df = kafka_stream(spark, args.topic, partitions=args.partitions, records=args.records, **options)
            trigger = {"availableNow": True}
        query = (
            df.writeStream.foreachBatch(sink).option("checkpointLocation", args.checkpoint).trigger(**trigger).start()
        )
        if args.source == "kafka_shaped":
            query.awaitTermination()
        else:
            # The rate source never ends: stop after enough batches, or when the query fails.
            while not enough.wait(0.5):
                if not query.isActive:
                    query.awaitTermination()  # raises the query's error
                    raise SystemExit("the query stopped early")
            query.stop()
            print(f"committed batches {committed}", flush=True)
    print("finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
