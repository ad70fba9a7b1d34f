"""Example: a confluent-kafka consumer that writes JSON orders into PostgreSQL exactly once.

Usage (a database with the offset store migrated, ``offsetstore migrate``)::

    python examples/kafka/orders_consumer.py --bootstrap localhost:9092 \\
        --database-url postgresql://app@db/shop --topic kafka-orders --group kafka-orders-etl \\
        --table kafka_orders

The table it writes (``make demo`` runs all of this against a local broker)::

    CREATE TABLE kafka_orders (topic text, "partition" int, "offset" bigint,
                               order_id bigint, amount numeric, PRIMARY KEY (topic, "partition", "offset"));

Stop it with Ctrl-C; kill it any way you like: restarted, it goes on where the
last committed transaction left off, and no order is written twice. A second copy
started with the same group takes over and the first one stops (fenced, exit code 3),
as does ``offsetstore groups reset kafka-orders-etl ... --execute``: restart it to
resume from the reset position.

``--mode upsert`` (the default) writes each record's row keyed on its coordinates
(topic, partition, offset), so after a reset backwards, which means "process these
again", the records read a second time replace their rows instead of failing on the
primary key. ``--mode append`` only inserts: use it with a table that has no such key
(each reprocessed record then adds a row), or where resets never go backwards.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException

from offsetstore.client import StaleGenerationError
from offsetstore.kafka_integration import ExactlyOnceWriter, StoredPositions, WatermarkReporter, consumer_config

# How often an idle consumer asks whether a reset or a newer consumer fenced it.
FENCE_CHECK_SECONDS = 2.0


def broker_problem(consumer: Consumer, bootstrap: str, topic: str) -> str | None:
    """What to fix when no broker answers at ``bootstrap`` or it has no ``topic`` (a consumer would wait forever)."""
    try:
        found = consumer.list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException as error:
        return f"no Kafka broker answered at {bootstrap} ({error.args[0].str()}): check --bootstrap"
    if found is None or found.error is not None:
        return f"topic {topic} does not exist on the broker at {bootstrap}: create it, or check --topic"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--table", default="kafka_orders")
    parser.add_argument(
        "--mode",
        choices=("upsert", "append"),
        default="upsert",
        help="upsert (default): a record read again after a reset replaces its row, keyed on "
        "(topic, partition, offset), which needs a unique key on them; append: insert only",
    )
    parser.add_argument("--report-interval", type=float, default=15.0, help="seconds between watermark reports (lag)")
    parser.add_argument(
        "-X", dest="extra", action="append", default=[], metavar="KEY=VALUE", help="more consumer config, as kcat's -X"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)

    config = consumer_config(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            **dict(kv.split("=", 1) for kv in args.extra),
        }
    )
    consumer = Consumer(config)
    if problem := broker_problem(consumer, args.bootstrap, args.topic):
        consumer.close()
        print(f"orders_consumer: {problem}", file=sys.stderr)
        return 2
    writer = ExactlyOnceWriter(
        args.database_url,
        args.group,
        args.table,
        columns=("topic", "partition", "offset", "order_id", "amount"),
        mode=args.mode,
        key_columns=("topic", "partition", "offset") if args.mode == "upsert" else (),
    )
    # Positions from the store's database, which the writer connects to anyway. KIP-848's
    # group.protocol=consumer and cooperative-sticky assign incrementally.
    cooperative = config.get("group.protocol") == "consumer" or "cooperative" in config.get(
        "partition.assignment.strategy", ""
    )
    positions = StoredPositions(
        writer.engine, args.group, auto_offset_reset=config["auto.offset.reset"], cooperative=cooperative
    )
    writer.join()  # this run's generation: fences any older run of the group
    consumer.subscribe([args.topic], on_assign=positions.on_assign, on_revoke=positions.on_revoke)
    lag = WatermarkReporter(consumer, writer, interval=args.report_interval)

    stopping = False
    checked = time.monotonic()

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not stopping:
            batch = consumer.consume(500, timeout=1.0)
            for m in batch:
                if m.error() is not None:
                    logging.warning("consumer error: %s", m.error())
            batch = [m for m in batch if m.error() is None]
            if batch:
                orders = [json.loads(m.value()) for m in batch]
                outcome = writer.write(batch, [{"order_id": o["id"], "amount": o["amount"]} for o in orders])
                logging.info("wrote %d orders (%d already delivered)", outcome.written, outcome.skipped)
                checked = time.monotonic()
            elif time.monotonic() - checked > FENCE_CHECK_SECONDS:
                # Idle: no write would notice a reset, so ask the store whether one happened.
                writer.check_fenced()
                checked = time.monotonic()
            lag.maybe_report()
    except StaleGenerationError:
        logging.error("fenced: a newer consumer of %s, or a reset, took over; stopping", args.group)
        return 3
    finally:
        lag.report()  # the last log ends seen, so that describe shows this run's lag
        consumer.close()
        writer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
