"""A legacy Spark job, the kind a user moves off: at-least-once foreachBatch rows, its position in its checkpoint.

Each batch's rows go into ``--table`` (``writer`` 'legacy') in a transaction of its own; Spark
commits the batch to its checkpoint after. In batch ``--dies-in``, once the rows are written,
the driver SIGKILLs its own process group (this interpreter and its JVM): it dies as a machine
would, between its write and Spark's commit, and leaves the batch planned and uncommitted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import psycopg

# The repository's root, as pytest sets it, for the tests' own Spark setup.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fixtures.fix_spark import build_spark, kafka_stream  # noqa: E402
from tests.fixtures.fix_spark_kafka import kafka_source  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("--libpq-url", "--table", "--topic", "--checkpoint", "--workdir"):
        p.add_argument(name, required=True)
    for name in ("--partitions", "--records", "--max-offsets-per-trigger", "--dies-in"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--bootstrap", help="read the topic with Spark's own Kafka source from this broker")
    args = p.parse_args()
    spark = build_spark("offsetstore-legacy-job", Path(args.workdir), kafka=args.bootstrap is not None)

    def write(batch_df, batch_id: int) -> None:
        rows = [
            (r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, r.timestampType) for r in batch_df.collect()
        ]
        with psycopg.connect(args.libpq_url) as db, db.cursor() as cur:
            cur.executemany(
                f'INSERT INTO {args.table} (key, value, topic, "partition", "offset", "timestamp", "timestampType", '
                "writer) VALUES (%s, %s, %s, %s, %s, %s, %s, 'legacy')",
                rows,
            )
        print(f"wrote batch {batch_id}: {len(rows)} rows", flush=True)
        if batch_id == args.dies_in:
            os.killpg(os.getpgrp(), signal.SIGKILL)

    if args.bootstrap:
        df = kafka_source(spark, args.bootstrap, args.topic, maxOffsetsPerTrigger=args.max_offsets_per_trigger)
    else:
        df = kafka_stream(
            spark,
            args.topic,
            partitions=args.partitions,
            records=args.records,
            maxOffsetsPerTrigger=args.max_offsets_per_trigger,
        )
    query = df.writeStream.foreachBatch(write).option("checkpointLocation", args.checkpoint).trigger(availableNow=True)
    query.start().awaitTermination()
    print("finished without dying", flush=True)


if __name__ == "__main__":
    main()
