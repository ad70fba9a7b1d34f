"""Messages/s of a confluent-kafka consumer writing to PostgreSQL: exactly-once writer vs at-least-once, same run.

Both variants read the same topic from a local Apache Kafka broker (KRaft, the tests'
``KafkaCluster``; ``--bootstrap`` for one of your own) with the same consumer
settings, build the same rows (``ExactlyOnceWriter.arrow_rows``) and COPY them into a
fresh table of the same shape:

- exactly-once: ``ExactlyOnceWriter.write`` -- rows and offsets in one transaction
  (group lock, generation check, skip check, offsets commit);
- at-least-once: the rows COPY'd in a transaction of their own, then the offsets
  committed over gRPC by ``AtLeastOnceCommitter`` (the usual "write, then commit").

Variants alternate for ``--rounds`` rounds; the median of each is printed with the
ratio exactly-once / at-least-once. Uses ``OFFSETSTORE_BENCH_DATABASE_URL`` if set,
else an embedded PostgreSQL (see ``_server.served``)::

    .venv/bin/python bench/kafka_consumer.py --messages 60000 --batch 500
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _server import served  # noqa: E402


def produce(bootstrap: str, topic: str, partitions: int, messages: int) -> None:
    from confluent_kafka import Producer

    from offsetstore.kafka_integration.local_kafka import producer_config

    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    for i in range(messages):
        producer.produce(topic, value=f'{{"id": {i}, "payload": "{"x" * 80}"}}'.encode(), partition=i % partitions)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def run(variant: str, *, bootstrap: str, topic: str, partitions: int, messages: int, batch: int, served_) -> float:
    """Consumes the whole topic once with ``variant``; returns messages per second."""
    import sqlalchemy as sa
    from confluent_kafka import Consumer

    from offsetstore.client import OffsetStoreClient
    from offsetstore.kafka_integration import AtLeastOnceCommitter, ExactlyOnceWriter, StoredPositions, consumer_config
    from offsetstore.sink import arrow_copy
    from offsetstore.sink import sql as sink_sql

    group = f"bench-{variant}-{uuid.uuid4().hex[:8]}"
    table = f"public.bench_kafka_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(served_.database_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE {table} (topic text, "partition" integer, "offset" bigint, value text, run bigint)'
        )
    client = OffsetStoreClient(served_.address)
    writer = ExactlyOnceWriter(served_.database_url, group, table)
    committer = AtLeastOnceCommitter(client, group)
    consumer = Consumer(
        consumer_config({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    )
    try:
        StoredPositions(client, group, auto_offset_reset="earliest").assign(
            consumer, [(topic, p) for p in range(partitions)]
        )
        done = 0
        start = None
        while done < messages:
            polled = [m for m in consumer.consume(batch, timeout=1.0) if m.error() is None]
            if not polled:
                continue
            start = start or time.perf_counter()
            rows = [{"value": m.value().decode(), "run": 1} for m in polled]
            if variant == "exactly-once":
                writer.write(polled, rows)
            else:
                data = writer.arrow_rows(polled, rows)
                with writer.engine.begin() as conn, conn.connection.driver_connection.cursor() as cur:
                    arrow_copy.copy_batches(
                        cur, sink_sql.copy_into(writer.target.table, data.column_names), data.to_batches()
                    )
                committer.commit(polled)
            done += len(polled)
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
        writer.close()
        client.close()
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {table}")
        engine.dispose()
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500, help="consume() batch size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", help="an Apache Kafka of your own (default: a local KRaft broker is started)")
    args = parser.parse_args()

    from offsetstore.kafka_integration.local_kafka import KAFKA_VERSION, KafkaCluster, KafkaUnavailable, create_topic

    with contextlib.ExitStack() as stack:
        if args.bootstrap:
            bootstrap, what = args.bootstrap, args.bootstrap
        else:
            try:
                bootstrap = stack.enter_context(KafkaCluster(1)).bootstrap
            except KafkaUnavailable as e:
                sys.exit(f"kafka_consumer: {e}")
            what = f"a local Apache Kafka {KAFKA_VERSION}"
        srv = stack.enter_context(served(max_workers=8, pool_size=4, prefix="offsetstore-bench-kafka-"))
        print(f"broker: {what}; {args.messages} messages over {args.partitions} partitions, batch {args.batch}")
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, args.partitions)
        produce(bootstrap, topic, args.partitions, args.messages)
        results: dict[str, list[float]] = {"exactly-once": [], "at-least-once": []}
        for r in range(args.rounds):
            # Alternate which goes first, so neither always gets the warmer caches.
            order = list(results) if r % 2 == 0 else list(reversed(results))
            for variant in order:
                rate = run(
                    variant,
                    bootstrap=bootstrap,
                    topic=topic,
                    partitions=args.partitions,
                    messages=args.messages,
                    batch=args.batch,
                    served_=srv,
                )
                results[variant].append(rate)
                print(f"round {r + 1} {variant:>14}: {rate:10.0f} msg/s", flush=True)
        eo = statistics.median(results["exactly-once"])
        alo = statistics.median(results["at-least-once"])
        print(f"median exactly-once  {eo:10.0f} msg/s")
        print(f"median at-least-once {alo:10.0f} msg/s")
        print(f"ratio exactly-once / at-least-once: {eo / alo:.2f}")


if __name__ == "__main__":
    main()
