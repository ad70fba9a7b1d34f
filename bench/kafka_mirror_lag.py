"""The Kafka mirror's lag for a Spark sink's group: from the sink's COMMIT to the offsets in Kafka's coordinator.

Starts an Apache Kafka broker (``offsetstore.kafka_integration.local_kafka``) and
``offsetstore serve --processes 2 --mirror-kafka-bootstrap ... --mirror-kafka-groups spark-
--mirror-interval 1s`` over one PostgreSQL, then writes ``--batches`` batches with the Spark
sink's own write (:func:`offsetstore.sink.batch_write.deliver_batch`, in a transaction of its
own, as the sink's driver runs it: the server never sees the commit), a random pause between
them, and after each COMMIT polls Kafka (AdminClient ``list_consumer_group_offsets``, every
20 ms) until the group's offsets are the batch's. Prints the lags' p50/p90/max, then Kafka's
own ``kafka-consumer-groups --describe`` of the group (the topic has no records: its log end
is 0, and the tool's lag negative). Exits 1 when a batch never shows up
(``--timeout``): what the mirror fed by the servicer's commits did.

Usage: ``python bench/kafka_mirror_lag.py [--batches 20] [--timeout 15]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid

from _server import served


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=15.0)
    args = parser.parse_args()

    import pyarrow as pa
    import sqlalchemy as sa
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from offsetstore.kafka_integration.local_kafka import KafkaCluster
    from offsetstore.sink.batch_write import SinkTarget, TableName, deliver_batch

    kafka = KafkaCluster(1).start()
    try:
        topic, partitions = f"lag-{uuid.uuid4().hex[:8]}", 3
        kafka.create_topic(topic, partitions)
        group = f"spark-lag-{uuid.uuid4().hex[:8]}"
        mirror = [
            "--processes", "2", "--mirror-kafka-bootstrap", kafka.bootstrap,
            "--mirror-kafka-groups", "spark-", "--mirror-interval", "1s",
        ]  # fmt: skip
        with served(extra_args=mirror) as server:
            engine = sa.create_engine(server.database_url)
            table = TableName("public", f"lag_{uuid.uuid4().hex[:8]}")
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    f'CREATE TABLE {table.regclass()} (topic text, "partition" integer, "offset" bigint, v text)'
                )
            admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
            asked = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])

            def in_kafka() -> dict[int, int]:
                (future,) = admin.list_consumer_group_offsets([asked], request_timeout=10).values()
                return {tp.partition: tp.offset for tp in future.result(timeout=15).topic_partitions if tp.offset >= 0}

            lags: list[float] = []
            try:
                for batch in range(args.batches):
                    offsets = range(batch * 10, batch * 10 + 10)
                    rows = pa.table(
                        {
                            "topic": [topic] * (10 * partitions),
                            "partition": pa.array([p for p in range(partitions) for _ in offsets], pa.int32()),
                            "offset": pa.array([o for _ in range(partitions) for o in offsets], pa.int64()),
                            "v": ["x"] * (10 * partitions),
                        }
                    )
                    time.sleep(random.uniform(0, 1))  # any phase of the mirror's interval
                    with engine.begin() as conn:
                        deliver_batch(conn, SinkTarget(table), rows, group_id=group, generation=0, actor="spark:bench")
                    committed = time.perf_counter()
                    want = {p: offsets[-1] + 1 for p in range(partitions)}
                    while in_kafka() != want:
                        if time.perf_counter() - committed > args.timeout:
                            print(f"batch {batch}: not in Kafka {args.timeout:g} s after its commit")
                            print(kafka.tool("kafka-consumer-groups", "--bootstrap-server", kafka.bootstrap,
                                             "--describe", "--group", group, check=False).stdout)  # fmt: skip
                            return 1
                        time.sleep(0.02)
                    lags.append(time.perf_counter() - committed)
            finally:
                with engine.begin() as conn:
                    conn.exec_driver_sql(f"DROP TABLE {table.regclass()}")
                engine.dispose()
            quantiles = statistics.quantiles(lags, n=10)
            print(
                f"{len(lags)} Spark sink batches, --mirror-interval 1s: commit -> Kafka p50 "
                f"{statistics.median(lags):.2f} s  p90 {quantiles[8]:.2f} s  max {max(lags):.2f} s"
            )
            describe = kafka.tool("kafka-consumer-groups", "--bootstrap-server", kafka.bootstrap, "--describe",
                                  "--group", group, check=False)  # fmt: skip
            print(describe.stdout)
    finally:
        kafka.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
