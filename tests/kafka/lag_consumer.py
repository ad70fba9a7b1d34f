"""A scripted consumer for the group status run (issue 36): Apache Kafka -> this process -> offsetstore over gRPC.

It never reports watermarks: the lag it shows comes from the server's own reads of Kafka.
``--mode``:

- ``fast``: commits the position after every poll;
- ``slow``: consumes at most ``--rate`` records a second, committing each;
- ``stalled``: reads, but commits the same offset (its first record's) again and again;
- ``quiet``: reads a topic to its end, commits, then stays alive without committing.

Prints ``committed <offset>`` after its first commit (then only ``--mode`` runs on).
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Consumer, TopicPartition

from offsetstore.client import OffsetStoreClient
from offsetstore.kafka_integration import consumer_config


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--server", "--group", "--topic", "--mode"):
        parser.add_argument(name, required=True)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args()
    consumer = Consumer(
        consumer_config({"bootstrap.servers": args.bootstrap, "group.id": args.group, "auto.offset.reset": "earliest"})
    )
    consumer.assign([TopicPartition(args.topic, 0, 0)])
    announced = False
    stalled_at: int | None = None
    with OffsetStoreClient(args.server, timeout=10) as client:
        while True:
            if args.mode == "slow":
                batch = consumer.consume(1, timeout=0.5)
                time.sleep(1 / args.rate)
            else:
                batch = consumer.consume(100, timeout=0.2)
            batch = [m for m in batch if m.error() is None]
            if not batch and args.mode != "stalled":
                continue
            if args.mode == "stalled":
                stalled_at = batch[0].offset() if stalled_at is None and batch else stalled_at
                if stalled_at is None:
                    continue
                offset = stalled_at
                time.sleep(0.2)
            else:
                offset = batch[-1].offset() + 1
            client.commit_offsets(args.group, {(args.topic, 0): offset})
            if not announced:
                print(f"committed {offset}", flush=True)
                announced = True


if __name__ == "__main__":
    sys.exit(main())
