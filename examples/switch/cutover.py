"""A planned cutover (``make switch-demo``): the Kafka recipe moved mid-stream from cluster A to cluster B.

Run ``make run`` in one terminal, then ``make switch-demo`` in another (Java 17+ and Maven: the
jars come from Maven Central once). It

1. starts two local Apache Kafka clusters, A and B (KRaft, one broker each), and MirrorMaker 2
   copying A to B (dedicated mode; ``orders`` on A is ``A.orders`` on B),
2. writes orders to ``orders`` on A with a transactional producer, some transactions aborted:
   B's copy has neither the aborted records nor the transaction markers, so a record's offset
   on B is not its offset on A,
3. runs the Kafka recipe (docs/kafka.md: ``ExactlyOnceWriter`` given its ``consumer``) on A into
   a sink table, and stops it mid-stream,
4. ``offsetstore groups switch`` from A to B: the dry run, then ``--execute``,
5. writes more orders on A (MirrorMaker copies them) and resumes the recipe on B, on ``A.orders``,
6. counts the sink table's orders: duplicates and missing, against what A committed. Exit 1 if any.

Each run is new: new clusters, so a new group (a group stays bound to the cluster it last ran on)
and the table emptied. ``--server`` / ``OFFSETSTORE_SERVER`` and ``--database-url`` /
``OFFSETSTORE_DATABASE_URL`` point it elsewhere; by default it uses ``make run``'s embedded database.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from offsetstore import storage
from offsetstore.cli.groups import main as groups_cli
from offsetstore.client import ClusterMismatchError, OffsetStoreClient, StoreUnavailableError
from offsetstore.kafka_integration import ExactlyOnceWriter, StoredPositions, consumer_config
from offsetstore.kafka_integration.local_kafka import KafkaCluster, KafkaUnavailable
from offsetstore.kafka_integration.local_mirror_maker import LocalMirrorMaker
from offsetstore.runtime.embedded import default_data_dir, running_url
from offsetstore.storage.engine import create_engine

TOPIC, PARTITIONS = "orders", 3
COLUMNS = ("topic", "partition", "offset", "order_id", "amount")


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def cli_command() -> str:
    """This interpreter's ``offsetstore``, as the user can type it: bare only where PATH finds that very one."""
    mine = Path(sys.executable).parent / "offsetstore"
    found = shutil.which("offsetstore")
    if found is not None and Path(found).resolve() == mine.resolve():
        return "offsetstore"
    try:
        return str(mine.relative_to(Path.cwd()))  # make switch-demo: .venv/bin/offsetstore
    except ValueError:
        return str(mine)


class OrderWriter:
    """A transactional producer on A's ``orders``: one order per partition a transaction, every fourth aborted."""

    def __init__(self, a: KafkaCluster) -> None:
        self.producer = Producer(a.producer_config(**{"transactional.id": f"orders-{uuid.uuid4().hex[:8]}"}))
        self.producer.init_transactions(30)
        self.committed: list[int] = []  # the ids of the orders A committed
        self.transactions = self.aborted = 0

    def write(self, transactions: int) -> None:
        for _ in range(transactions):
            ids = [self.transactions * PARTITIONS + p for p in range(PARTITIONS)]
            self.producer.begin_transaction()
            for p, i in enumerate(ids):
                value = json.dumps({"id": i, "amount": f"{i % 90 + 10}.{i % 100:02d}"})
                self.producer.produce(TOPIC, key=str(i).encode(), value=value.encode(), partition=p)
            self.transactions += 1
            if self.transactions % 4 == 3:
                self.producer.flush(30)  # delivered before the abort (librdkafka#4849)
                self.producer.abort_transaction(30)
                self.aborted += 1
            else:
                self.producer.commit_transaction(30)
                self.committed += ids


def wait_mirrored(b: KafkaCluster, orders: OrderWriter, seconds: float = 120) -> None:
    """Until B's ``A.orders`` holds every order A committed (B's copy has no markers: its end offset is its count)."""
    probe = Consumer(b.client_config(**{"group.id": "cutover-probe"}))
    want = [len(orders.committed) // PARTITIONS] * PARTITIONS
    deadline = time.monotonic() + seconds
    try:
        while True:
            if f"A.{TOPIC}" in probe.list_topics(timeout=10).topics:
                ends = [
                    probe.get_watermark_offsets(TopicPartition(f"A.{TOPIC}", p), timeout=10)[1]
                    for p in range(PARTITIONS)
                ]
                if ends == want:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"MirrorMaker did not copy A's orders to B within {seconds} s")
            time.sleep(0.5)
    finally:
        probe.close()


def recipe(database_url: str, group: str, table: str, cluster: KafkaCluster, topic: str, stop_after: int = 0) -> int:
    """The Kafka recipe (docs/kafka.md) on ``cluster``'s ``topic``: until ``stop_after`` orders, else the topic's end.

    Given its consumer, the writer binds the group to the consumer's cluster and stores, with each
    offset, the fingerprint of the record before it: what ``groups switch`` looks for on B.
    """
    consumer = Consumer(
        consumer_config({
            **cluster.client_config(), "group.id": group, "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "max.partition.fetch.bytes": 1,  # one batch per partition a fetch: the partitions advance together
        })
    )  # fmt: skip
    writer = ExactlyOnceWriter(database_url, group, table, columns=COLUMNS, consumer=consumer)
    try:
        writer.join()  # binds the group to this cluster, or refuses: ClusterMismatchError
        StoredPositions(writer.engine, group, auto_offset_reset="earliest").assign(
            consumer, [(topic, p) for p in range(PARTITIONS)]
        )
        written, at_end = 0, set()
        while len(at_end) < PARTITIONS and not (stop_after and written >= stop_after):
            batch = []
            for m in consumer.consume(5, timeout=1.0):  # records, and an end-of-partition event where one ends
                if m.error() is None:
                    batch.append(m)
                    at_end.discard(m.partition())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
            if batch:
                orders = [json.loads(m.value()) for m in batch]
                writer.write(batch, [{"order_id": o["id"], "amount": o["amount"]} for o in orders])
                written += len(batch)
        return written
    finally:
        writer.close()
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("OFFSETSTORE_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--database-url", default=os.environ.get("OFFSETSTORE_DATABASE_URL"))
    parser.add_argument("--group", help="default: switch-orders-<a new id> (each run's clusters are new)")
    parser.add_argument("--table", default="switch_orders")
    parser.add_argument("--transactions", type=int, default=16, help="on A before the switch (a fourth aborted)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the clusters' JVMs stopped on the way out, as on Ctrl-C
    group = args.group or f"switch-orders-{uuid.uuid4().hex[:6]}"

    database_url = args.database_url or running_url(default_data_dir())
    if database_url is None:
        print(
            f"No database: no embedded PostgreSQL runs in {default_data_dir()}. Start the server first "
            "(make run, in another terminal), or give --database-url.",
            file=sys.stderr,
        )
        return 2
    engine = create_engine(database_url, pool_size=1)
    with engine.begin() as conn:  # the server must see this database: a join here is seen there
        generation = storage.join_group(conn, group, "cutover")
    with OffsetStoreClient(args.server, timeout=10) as client:
        try:
            if client.fetch_offsets(group).generation != generation:
                print(
                    f"The server at {args.server} does not use {database_url}: give its --database-url.",
                    file=sys.stderr,
                )
                return 2
        except StoreUnavailableError:
            print(
                f"No offsetstore server at {args.server}: start one with make run (another terminal).", file=sys.stderr
            )
            return 2
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE IF NOT EXISTS {args.table} (topic text, "partition" int, "offset" bigint, '
            "order_id bigint, amount numeric)"
        )
        conn.exec_driver_sql(f"TRUNCATE {args.table}")
    engine.dispose()

    say("Starting clusters A and B (Apache Kafka, KRaft) and MirrorMaker 2 from A to B: a minute or two")
    a, b = KafkaCluster(1, heap="256m"), KafkaCluster(1, heap="256m")
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for started in [pool.submit(c.start) for c in (a, b)]:
                started.result()
        with LocalMirrorMaker(a, b) as mirror:
            print(f"A: {a.bootstrap}, B: {b.bootstrap}, MirrorMaker 2: pid {mirror.pid}", flush=True)
            return cutover(a, b, database_url, group, args)
    except (KafkaUnavailable, RuntimeError) as error:
        print(f"The cutover stopped: {error}", file=sys.stderr)
        return 1
    finally:
        b.stop()
        a.stop()


def cutover(a: KafkaCluster, b: KafkaCluster, database_url: str, group: str, args: argparse.Namespace) -> int:
    a.create_topic(TOPIC, PARTITIONS)
    orders = OrderWriter(a)
    orders.write(args.transactions)
    say(
        f"A: {orders.transactions} transactions into {TOPIC} ({PARTITIONS} partitions), {orders.aborted} aborted: "
        f"{len(orders.committed)} orders committed"
    )
    read = recipe(database_url, group, args.table, a, TOPIC, stop_after=len(orders.committed) // 2)
    say(f"The recipe read {read} orders on A (group {group}) and stopped mid-stream. Where it stands:")
    run_groups("describe", group, server=args.server)

    wait_mirrored(b, orders)
    say("MirrorMaker copied A's orders to B. The switch, a dry run:")
    switch = ["switch", group, "--to-bootstrap-server", b.bootstrap, "--from-bootstrap-server", a.bootstrap,
              "--replication-policy", "default", "--source-alias", "A"]  # fmt: skip
    run_groups(*switch, server=args.server)
    say("The same with --execute:")
    run_groups(*switch, "--execute", server=args.server)
    try:
        recipe(database_url, group, args.table, a, TOPIC)
        raise RuntimeError("the recipe on A still ran after the switch")
    except ClusterMismatchError:
        say("The group is B's now: the recipe on A is refused (ClusterMismatchError)")

    orders.write(args.transactions // 2)
    wait_mirrored(b, orders)
    say(f"A's producer went on ({len(orders.committed)} orders committed in all); the recipe resumes on B, A.{TOPIC}")
    read = recipe(database_url, group, args.table, b, f"A.{TOPIC}")
    print(f"The recipe read {read} orders on B, to the end", flush=True)
    run_groups("describe", group, server=args.server)
    return check(database_url, args.table, orders.committed)


def run_groups(*argv: str, server: str) -> None:
    print(f"$ {cli_command()} groups {' '.join(argv)}", flush=True)
    if groups_cli(["--server", server, *argv]) != 0:
        raise RuntimeError(f"offsetstore groups {argv[0]} failed")


def check(database_url: str, table: str, committed: list[int]) -> int:
    engine = create_engine(database_url, pool_size=1)
    with engine.connect() as conn:
        seen = Counter(i for (i,) in conn.exec_driver_sql(f"SELECT order_id FROM {table}"))
    engine.dispose()
    duplicates = sum(n - 1 for n in seen.values())
    missing = len(set(committed) - set(seen))
    aborted = len(set(seen) - set(committed))
    say(
        f"Check: {len(committed)} orders committed on A, {seen.total()} rows in {table}: "
        f"{duplicates} duplicates, {missing} missing, {aborted} from aborted transactions"
    )
    if duplicates or missing or aborted:
        print("NOT exactly once across the switch: see above", file=sys.stderr)
        return 1
    print("Exactly once across the switch.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
