"""docs/kafka.md's consumer (examples/kafka/orders_consumer.py) on Apache Kafka: SIGKILLs and PostgreSQL crashes.

Orders keep arriving while the consumer is SIGKILLed at random moments and its PostgreSQL
is crashed (every process SIGKILLed) and started again; a crashed run exits on its broken
connection and is started again, as a supervisor would. The table has no unique key and the
consumer runs ``--mode append``, so a record written twice would be two rows: at the end each
order is in the table exactly once. Once with the classic group protocol, once with
``group.protocol=consumer`` (KIP-848).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka import Producer

from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_production import migrate
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "kafka" / "orders_consumer.py"
PARTITIONS = 3
RATE = 300  # orders a second while the faults happen
FAULTS = ["kill", "postgres", "kill", "postgres"]


class Orders:
    """Produces orders (JSON, ids 0, 1, ...) at RATE a second from a thread until stopped."""

    def __init__(self, broker, topic: str) -> None:
        self.producer = Producer(broker.producer_config())
        self.topic = topic
        self.sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) * RATE)
            for i in range(self.sent, due):
                order = {"id": i, "amount": f"{i}.25"}
                self.producer.produce(self.topic, value=json.dumps(order).encode(), partition=i % PARTITIONS)
            self.sent = max(self.sent, due)
            self.producer.poll(0)
            self.stopping.wait(0.02)

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join(30)
        assert self.producer.flush(30) == 0
        return self.sent


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_orders_consumer_survives_kills_and_postgres_crashes(
    broker, restartable_postgres, protocol: str, tmp_path: Path
) -> None:
    node = restartable_postgres
    migrate(node.url())
    run = uuid.uuid4().hex[:8]
    topic, group, table = f"chaos-{run}", f"chaos-{run}", f"public.chaos_{run}"
    broker.create_topic(topic, PARTITIONS)
    node.query(f'CREATE TABLE {table} (topic text, "partition" int, "offset" bigint, order_id bigint, amount numeric)')
    engine = sa.create_engine(node.url().replace("postgresql://", "postgresql+psycopg://"), pool_pre_ping=True)
    # Classic groups wait for a SIGKILLed member's session to time out before they assign its
    # partitions again (librdkafka's default: 45 s); KIP-848 groups take the broker's setting.
    group_settings = ["-X", "session.timeout.ms=6000"] if protocol == "classic" else ["-X", "group.protocol=consumer"]
    command = [
        sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--database-url", node.url(),
        "--topic", topic, "--group", group, "--table", table, "--mode", "append", "--report-interval", "1",
        *group_settings,
    ]  # fmt: skip

    log = tmp_path / "consumer.log"
    runs: list[subprocess.Popen[bytes]] = []
    counts = {"kills": 0, "crashes": 0, "restarts": 0}

    def running() -> subprocess.Popen[bytes]:
        """The current run; a new one where the last ended (a PostgreSQL crash ends it), as a supervisor does."""
        if not runs or runs[-1].poll() is not None:
            counts["restarts"] += bool(runs)
            with log.open("ab") as out:
                runs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
        return runs[-1]

    def progress() -> int:
        running()
        return sum(stored_offsets(engine, group).values())

    orders = Orders(broker, topic)
    orders.thread.start()
    rng = random.Random()
    try:
        for fault in FAULTS:
            before = progress()
            wait_for(
                lambda before=before: progress() > before, f"the consumer to commit past {before} before a {fault}", 90
            )
            time.sleep(rng.uniform(0, 0.5))  # a random moment in full flow, not a synchronisation
            if fault == "kill":
                running().kill()
                running().wait()
                counts["kills"] += 1
            else:
                node.crash_and_start()
                counts["crashes"] += 1
        total = orders.stop()
        ends = {(topic, p): len(range(p, total, PARTITIONS)) for p in range(PARTITIONS)}
        wait_for(lambda: progress() >= 0 and stored_offsets(engine, group) == ends, f"the log ends {ends}", 120)
        last = running()
        last.send_signal(signal.SIGTERM)
        assert last.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        orders.stopping.set()
        for process in runs:
            if process.poll() is None:
                process.kill()
                process.wait()
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f'SELECT topic, "partition", "offset", order_id FROM {table}').all()
    engine.dispose()
    print(
        f"\n{protocol} group protocol: {total} orders, {counts['kills']} SIGKILLs, {counts['crashes']} PostgreSQL "
        f"crashes, {counts['restarts']} restarts; {len(rows) - len(set(rows))} duplicates, "
        f"{total - len(set(rows))} lost"
    )
    assert_exactly_once(
        [(t, p, o) for t, p, o, _ in rows], {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(total)}
    )
    assert sorted(order_id for *_, order_id in rows) == list(range(total))
