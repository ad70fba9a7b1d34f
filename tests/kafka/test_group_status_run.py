"""Issue 36's proof: a real ``offsetstore serve`` reading watermarks from Apache Kafka, six scripted consumer processes.

A producer writes to a busy topic at a steady rate; the consumers never report watermarks, so
every lag below comes from the server's own reads of Kafka. Each group must reach its verdict:
fast OK, slow (70% of the rate) LAGGING, stalled STALLED, SIGKILLed STOPPED (its lag in seconds
growing after its death), caught up on a quiet topic IDLE, and LOST: records below its offset
deleted by ``kafka-delete-records`` (what retention does), the log start read by the server.
Waits are on conditions; the latencies measured are printed (-s shows them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import GroupStatus
from offsetstore.kafka_integration.local_kafka import producer_config
from tests.fixtures.fix_db import conninfo
from tests.fixtures.fix_kafka import ConsumerProcess
from tests.fixtures.fix_server import start_serve
from tests.fixtures.node_example import NODE, npm_installed

SCRIPT = Path(__file__).with_name("lag_consumer.py")
NODE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sql" / "node"
RATE = 40.0  # records a second into the busy topic
WINDOW = 4.0  # --status-window
INTERVAL = 0.5  # --watermarks-kafka-interval


def produce_steadily(bootstrap: str, topic: str, stop: threading.Event) -> None:
    producer = Producer(producer_config(bootstrap))
    started, sent = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * RATE)
        for _ in range(due - sent):
            producer.produce(topic, value=b"r", partition=0)
        sent = max(sent, due)
        producer.poll(0)
        stop.wait(0.02)
    producer.flush(10)


def fill(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for _ in range(records):
        producer.produce(topic, value=b"q", partition=0)
    assert producer.flush(30) == 0


@pytest.mark.slow
def test_six_groups_reach_their_verdicts(broker, database_url: str, tmp_path: Path) -> None:
    run = f"run{uuid.uuid4().hex[:8]}"
    busy, quiet, lost_topic = (f"{run}-{name}" for name in ("busy", "quiet", "lost"))
    for topic in (busy, quiet, lost_topic):
        broker.create_topic(topic, 1)
    fill(broker.bootstrap, quiet, 20)
    fill(broker.bootstrap, lost_topic, 200)
    watched = f"{run}-w-"
    served = start_serve(
        tmp_path / "data",
        "--database-url", database_url,
        "--watermarks-kafka-bootstrap", broker.bootstrap,
        "--watermarks-kafka-groups", watched,
        "--watermarks-kafka-interval", str(INTERVAL),
        "--status-window", f"{WINDOW}s",
    )  # fmt: skip
    stop = threading.Event()
    producer = threading.Thread(target=produce_steadily, args=(broker.bootstrap, busy, stop), daemon=True)
    producer.start()
    consumers: dict[str, subprocess.Popen[str]] = {}

    def consume(name: str, topic: str, mode: str, *extra: str) -> str:
        group = f"{watched}{name}"
        consumers[name] = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--bootstrap", broker.bootstrap, "--server", served.address,
             "--group", group, "--topic", topic, "--mode", mode, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        return group

    try:
        groups = {
            "fast": consume("fast", busy, "fast"),
            "slow": consume("slow", busy, "slow", "--rate", str(0.7 * RATE)),
            "stalled": consume("stalled", busy, "stalled"),
            "killed": consume("killed", busy, "fast"),
            "idle": consume("idle", quiet, "fast"),
            "lost": consume("lost", lost_topic, "stalled"),  # commits offset 0 again and again
        }
        for name, process in consumers.items():
            line = process.stdout.readline()
            assert line.startswith("committed"), f"{name}: {line}{process.stdout.read() if process.poll() else ''}"
        # An operator deletes records 0..99 of the lost topic (its group committed 0), as retention would.
        plan = tmp_path / "delete.json"
        plan.write_text(
            json.dumps({"version": 1, "partitions": [{"topic": lost_topic, "partition": 0, "offset": 100}]})
        )
        broker.tool("kafka-delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", str(plan))
        started = RUN_START[0] = time.monotonic()
        TIMELINE.clear()
        with OffsetStoreClient(served.address, timeout=10) as client:
            expected = {
                "fast": GroupStatus.OK,
                "slow": GroupStatus.LAGGING,
                "stalled": GroupStatus.STALLED,
                "idle": GroupStatus.IDLE,
                "lost": GroupStatus.LOST,
            }
            reached = wait_for(client, groups, expected, started, deadline=60)
            assert not consumers["killed"].poll()
            os.kill(consumers["killed"].pid, signal.SIGKILL)
            consumers["killed"].wait()
            killed = time.monotonic()
            reached.update(wait_for(client, groups, {"killed": GroupStatus.STOPPED}, killed, deadline=60))
            # The fast consumer is still fine, and the dead one's lag in seconds keeps growing from
            # the server's watermarks (the consumers report none).
            first = client.describe_group(groups["killed"]).partitions[0]
            later = wait_until(
                lambda: client.describe_group(groups["killed"]).partitions[0],
                lambda p: p.watermark_time > first.watermark_time and p.lag_seconds > first.lag_seconds + 1,
                deadline=30,
            )
            assert later.log_end_offset > first.log_end_offset
            assert client.describe_group(groups["fast"]).status == GroupStatus.OK
            print(f"\nverdict latency (s), window {WINDOW}, reader interval {INTERVAL}: {reached}")
            if os.environ.get("OFFSETSTORE_STATUS_TIMELINE"):
                Path(os.environ["OFFSETSTORE_STATUS_TIMELINE"]).write_text(
                    json.dumps(
                        {"window": WINDOW, "interval": INTERVAL, "killed_at": killed - started, "looks": TIMELINE}
                    )
                )
    finally:
        stop.set()
        for process in consumers.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
        producer.join(15)
        assert served.terminate() == 0, served.output()


def wait_until(read, done, deadline: float):
    until = time.monotonic() + deadline
    while True:
        found = read()
        if done(found):
            return found
        assert time.monotonic() < until, f"not reached: {found}"
        time.sleep(0.1)


#: (seconds since the run's start, group, verdict) of every look: OFFSETSTORE_STATUS_TIMELINE=FILE writes
#: them as JSON, which bench/status_timeline.py draws (docs/images/status-timeline.png).
TIMELINE: list[tuple[float, str, str]] = []
RUN_START = [0.0]


def wait_for(client, groups, expected, since: float, deadline: float) -> dict[str, float]:
    """Seconds from ``since`` until each group's verdict is the expected one (and says why not when it is not)."""
    reached: dict[str, float] = {}
    until = time.monotonic() + deadline
    while len(reached) < len(expected):
        for name, group in groups.items():
            found = client.describe_group(group)
            TIMELINE.append((round(time.monotonic() - RUN_START[0], 2), name, found.status.name))
            if name in expected and name not in reached and found.status == expected[name]:
                reached[name] = round(time.monotonic() - since, 1)
        if time.monotonic() > until:
            missing = {n: client.describe_group(groups[n]).status_reason for n in expected if n not in reached}
            raise AssertionError(f"no verdict within {deadline}s: {missing}")
        time.sleep(0.1)
    return reached


@pytest.mark.slow
@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (examples/sql/node needs node >= 18)")
def test_the_sql_api_node_consumer_killed_turns_stopped(
    broker, database_url: str, group_id: str, make_table, tmp_path: Path
) -> None:
    """A consumer on the SQL API reports no watermarks: its lag and its death come from the server's reads."""
    npm_installed(NODE_EXAMPLE, "kafkajs")
    topic = f"{group_id}-node"
    broker.create_topic(topic, 1)
    table = make_table()
    served = start_serve(
        tmp_path / "data",
        "--database-url", database_url,
        "--watermarks-kafka-bootstrap", broker.bootstrap,
        "--watermarks-kafka-groups", group_id,
        "--watermarks-kafka-interval", str(INTERVAL),
        "--status-window", f"{WINDOW}s",
    )  # fmt: skip
    stop = threading.Event()
    producer = threading.Thread(target=produce_steadily, args=(broker.bootstrap, topic, stop), daemon=True)
    producer.start()
    consumer = ConsumerProcess(
        [str(NODE), str(NODE_EXAMPLE / "consumer.js"), "--bootstrap", broker.bootstrap,
         "--database-url", conninfo(database_url), "--group", group_id, "--topic", topic,
         "--table", table.name, "--kafka-group", f"k-{uuid.uuid4().hex[:10]}"]
    )  # fmt: skip
    try:
        with OffsetStoreClient(served.address, timeout=10) as client:
            for _ in range(3):
                consumer.wait_for_line("wrote")
            # The server's own read (the consumer reports none) comes within a round of the first commit.
            alive = wait_until(
                lambda: client.describe_group(group_id),
                lambda g: bool(g.partitions) and g.partitions[0].watermark_time is not None,
                deadline=30,
            )
            assert alive.partitions[0].watermark_time is not None
            consumer.kill()
            killed = time.monotonic()
            latency = wait_for(client, {"node": group_id}, {"node": GroupStatus.STOPPED}, killed, deadline=60)
            print(f"\nSQL-API Node consumer: STOPPED {latency['node']} s after its SIGKILL (window {WINDOW} s)")
    finally:
        stop.set()
        consumer.stop()
        producer.join(15)
        assert served.terminate() == 0, served.output()
