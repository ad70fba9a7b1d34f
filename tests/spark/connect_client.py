"""A Spark Connect client running the exactly-once query, in a process of its own so that a test can kill it.

Run by ``test_connect.py``. The query lives on the Connect server; the sink is pickled
to the server, whose Python worker calls it for each batch.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from offsetstore.spark_integration import ExactlyOnceSink, starting_offsets
from offsetstore.spark_integration.testing import KafkaShapedSource


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--remote", required=True, help="sc://host:port")
    p.add_argument("--database-url", required=True)
    p.add_argument("--group-id", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--max-offsets-per-trigger", type=int, required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trigger", choices=["interval", "available-now"], required=True)
    args = p.parse_args()

    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    spark.dataSource.register(KafkaShapedSource)
    df = (
        spark.readStream.format("kafka_shaped")
        .option("subscribe", args.topic)
        .option("partitions", args.partitions)
        .option("records", args.records)
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        # Read in the client: the store's database, as any job does before it starts.
        .option("startingOffsets", starting_offsets(args.database_url, args.group_id, {args.topic: args.partitions}))
        .load()
    )
    sink = ExactlyOnceSink(args.database_url, args.group_id, args.table, write_path="auto", executor_threshold=50)
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", args.checkpoint)
    if args.trigger == "interval":
        query = writer.trigger(processingTime="500 milliseconds").start()
    else:
        query = writer.trigger(availableNow=True).start()
    print(f"started query {query.id}", flush=True)
    query.awaitTermination()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
