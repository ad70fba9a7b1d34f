"""One run of a test pipeline in a process of its own, which SIGKILLs itself at a chosen point of the sink.

Run by the crash tests (``test_crash.py``): the driver dies as a machine would, with
no exception handler, no finally block and no clean JVM shutdown, and the next run
starts on whatever it left behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from offsetstore.spark_integration import ExactlyOnceSink, starting_offsets

# tests/spark for its conftest, tests/ for the helpers that conftest imports, as pytest sets them.
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]
from conftest import build_spark, kafka_stream  # noqa: E402  (the tests' own Spark setup)


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
    p.add_argument("--write-path", choices=["driver", "executors"], required=True)
    p.add_argument("--from-store", action="store_true", help="startingOffsets from the offset store")
    p.add_argument("--crash-stage", help="the sink's stage at which to die")
    p.add_argument("--crash-batch", type=int, help="the batch id at which to die")
    args = p.parse_args()

    spark = build_spark("offsetstore-crash-test", Path(args.workdir))
    sink = ExactlyOnceSink(args.database_url, args.group_id, args.table, write_path=args.write_path)
    if args.crash_stage:

        def crash(stage: str, batch_id: int) -> None:
            if stage == args.crash_stage and batch_id == args.crash_batch:
                print(f"crashing at {stage} of batch {batch_id}", flush=True)
                # The whole process group: this interpreter and its JVM, at once.
                os.killpg(os.getpgrp(), signal.SIGKILL)

        sink._fault_hook = crash
    options = {"maxOffsetsPerTrigger": args.max_offsets_per_trigger}
    if args.from_store:
        options["startingOffsets"] = starting_offsets(args.database_url, args.group_id, {args.topic: args.partitions})
    df = kafka_stream(spark, args.topic, partitions=args.partitions, records=args.records, **options)
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
