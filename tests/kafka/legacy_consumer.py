"""A legacy at-least-once consumer, the kind a user moves off: Kafka group offsets, rows written before the commit.

Subscribes as Kafka group ``--group``, and for each poll inserts the records' rows (``run`` 0)
in a transaction of its own, prints ``wrote <n>``, then commits the poll's offsets to Kafka
synchronously and prints ``committed``. With ``--hold-after N`` it prints ``holding`` after the
N-th poll's rows are written and waits there, before its Kafka commit, for the test's SIGKILL:
the crash an at-least-once consumer turns into duplicates. Exits 0 after ``--idle-exit`` seconds
without records.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import psycopg
from confluent_kafka import Consumer


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--database-url", "--group", "--topic", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--hold-after", type=int, default=0)
    parser.add_argument("--idle-exit", type=float, default=3.0)
    args = parser.parse_args()

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # Killed, it stays a member of its group this long; the adoption waits for that.
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([args.topic])
    polls = 0
    idle_since = time.monotonic()
    with psycopg.connect(args.database_url.replace("postgresql+psycopg://", "postgresql://")) as db:
        while True:
            batch = [m for m in consumer.consume(args.batch, timeout=0.2) if m.error() is None]
            if not batch:
                if time.monotonic() - idle_since > args.idle_exit:
                    consumer.close()
                    return 0
                continue
            idle_since = time.monotonic()
            with db.transaction(), db.cursor() as cur:
                cur.executemany(
                    f'INSERT INTO {args.table} (topic, "partition", "offset", value, run) VALUES (%s, %s, %s, %s, 0)',
                    [(m.topic(), m.partition(), m.offset(), m.value().decode()) for m in batch],
                )
            polls += 1
            print(f"wrote {len(batch)}", flush=True)
            if polls == args.hold_after:
                print("holding", flush=True)
                while True:
                    signal.pause()  # written, not yet committed to Kafka: the test kills it here
            consumer.commit(asynchronous=False)
            print("committed", flush=True)


if __name__ == "__main__":
    sys.exit(main())
