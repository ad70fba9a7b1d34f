"""Example: a confluent-kafka consumer that writes JSON orders into PostgreSQL exactly once.

Usage (a database with the offset store migrated, ``offsetstore migrate``)::

    python examples/kafka/orders_consumer.py --bootstrap localhost:9092 \\
        --database-url postgresql://app@db/orders --topic orders --group orders-etl

The table it writes::

    CREATE TABLE orders (topic text, "partition" int, "offset" bigint,
                         order_id bigint, amount numeric, PRIMARY KEY (topic, "partition", "offset"));

Stop it with Ctrl-C; kill it any way you like: restarted, it goes on where the
last committed transaction left off, and no order is written twice. A second copy
started with the same group takes over and the first one stops (fenced), as does
``offsetstore groups reset orders-etl ... --execute`` (restart it to resume from the
reset position).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal

from confluent_kafka import Consumer

from offsetstore.client import StaleGenerationError
from offsetstore.kafka_integration import ExactlyOnceWriter, StoredPositions, WatermarkReporter, consumer_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--table", default="orders")
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
    writer = ExactlyOnceWriter(
        args.database_url,
        args.group,
        args.table,
        columns=("topic", "partition", "offset", "order_id", "amount"),
    )
    # Positions from the store's database, which the writer connects to anyway.
    positions = StoredPositions(writer.engine, args.group, auto_offset_reset=config["auto.offset.reset"])
    writer.join()  # this run's generation: fences any older run of the group
    consumer.subscribe([args.topic], on_assign=positions.on_assign, on_revoke=positions.on_revoke)
    lag = WatermarkReporter(consumer, writer, interval=15)

    stopping = False

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
            lag.maybe_report()
    except StaleGenerationError:
        logging.error("fenced: a newer consumer of %s, or a reset, took over; stopping", args.group)
        return 3
    finally:
        consumer.close()
        writer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
