"""A consumer process for the crash, takeover and reset tests: Apache Kafka -> ExactlyOnceWriter -> PostgreSQL.

Prints ``joined <generation>`` once it joined the group and ``wrote <n>`` after each
committed batch; exits 0 after ``--idle-exit`` seconds without messages, and 3 when
fenced (``fenced <current generation>``). ``--hold`` keeps each transaction open for a
random time up to that many seconds after the rows are written, so a SIGKILL from the
test often lands between the write and the COMMIT. ``--after-first-wait-for PATH`` stops
after the first committed batch until PATH exists: the takeover test starts its second
consumer then, so the first one is still running when it is fenced, however slow the start.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

from confluent_kafka import Consumer

from offsetstore.client import StaleGenerationError
from offsetstore.kafka_integration import ExactlyOnceWriter, StoredPositions, WatermarkReporter, consumer_config


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--database-url", "--group", "--topic", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--idle-exit", type=float, default=2.0)
    parser.add_argument("--subscribe", action="store_true", help="subscribe() instead of assign()")
    parser.add_argument("--after-first-wait-for", metavar="PATH", help="after the first batch, wait for PATH")
    args = parser.parse_args()

    config = consumer_config(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
        }
    )
    consumer = Consumer(config)
    writer = ExactlyOnceWriter(
        args.database_url, args.group, args.table, columns=("topic", "partition", "offset", "value", "run")
    )
    positions = StoredPositions(writer.engine, args.group, auto_offset_reset="earliest")
    generation = writer.join()
    print(f"joined {generation}", flush=True)
    if args.subscribe:
        consumer.subscribe([args.topic], on_assign=positions.on_assign, on_revoke=positions.on_revoke)
    else:
        positions.assign(consumer, [(args.topic, p) for p in range(args.partitions)])
    reporter = WatermarkReporter(consumer, writer, interval=1.0)
    idle_since = time.monotonic()
    try:
        while True:
            batch = consumer.consume(args.batch, timeout=0.2)
            batch = [m for m in batch if m.error() is None]
            if not batch:
                if time.monotonic() - idle_since > args.idle_exit:
                    return 0
                continue
            idle_since = time.monotonic()
            rows = [{"value": m.value().decode(), "run": generation} for m in batch]
            with writer.engine.begin() as conn:
                writer.write(batch, rows, conn=conn)
                if args.hold:
                    time.sleep(random.uniform(0, args.hold))
            print(f"wrote {len(batch)}", flush=True)
            reporter.maybe_report()
            if args.after_first_wait_for:
                while not os.path.exists(args.after_first_wait_for):
                    time.sleep(0.05)
                args.after_first_wait_for = None
    except StaleGenerationError as e:
        print(f"fenced {e}", flush=True)
        return 3
    finally:
        consumer.close()
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
