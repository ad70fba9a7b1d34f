"""The example program runs as documented: subscribe(), orders into PostgreSQL once each, SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_server import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "kafka" / "orders_consumer.py"


def test_orders_consumer_example(broker, database_url, engine, group_id, make_topic, make_table):
    topic = make_topic(partitions=2)
    table = make_table(', order_id bigint, amount numeric, PRIMARY KEY (topic, "partition", "offset")')
    producer = Producer(broker.producer_config())
    for i in range(40):
        producer.produce(topic.name, value=json.dumps({"id": i, "amount": f"{i}.50"}).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    command = [
        sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--database-url", database_url,
        "--topic", topic.name, "--group", group_id, "--table", table.name,
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while stored_offsets(engine, group_id) != {(topic.name, 0): 20, (topic.name, 1): 20}:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the example did not consume the topic within 60 s"
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    with engine.connect() as conn:
        orders = conn.exec_driver_sql(f"SELECT order_id, amount FROM {table.name} ORDER BY order_id").all()
    assert [(o, str(a)) for o, a in orders] == [(i, f"{i}.50") for i in range(40)]


def offsetstore_cli(server_address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``offsetstore groups ARGS`` as a user types it, against the test's server."""
    command = [sys.executable, "-m", "offsetstore.cli.main", "groups", "--server", server_address, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_the_worked_example_survives_its_reset_and_restart(
    broker, database_url, engine, server, group_id, make_topic, make_table
):
    """docs/kafka.md's worked example, step by step: consume, describe, reset backwards, restart."""
    topic = make_topic(partitions=2)
    # Step 2's table: the coordinates are its primary key.
    table = make_table(', order_id bigint, amount numeric, PRIMARY KEY (topic, "partition", "offset")')
    producer = Producer(broker.producer_config())

    def produce(first: int, last: int) -> None:
        for i in range(first, last):
            producer.produce(topic.name, value=json.dumps({"id": i, "amount": f"{i}.50"}).encode(), partition=i % 2)
        assert producer.flush(30) == 0

    def consumer() -> subprocess.Popen[str]:
        command = [
            sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--database-url", database_url,
            "--topic", topic.name, "--group", group_id, "--table", table.name, "--report-interval", "1",
        ]  # fmt: skip
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait_for(offsets: dict, proc: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 60
        while stored_offsets(engine, group_id) != offsets:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, f"stored {stored_offsets(engine, group_id)}, waiting for {offsets}"
            time.sleep(0.3)

    # Steps 3 and 4: 100 orders, the consumer takes them all.
    produce(0, 100)
    first = consumer()
    try:
        wait_for({(topic.name, 0): 50, (topic.name, 1): 50}, first)
        # Step 5: describe shows the group caught up once the consumer reported its watermarks.
        deadline = time.monotonic() + 30
        while True:
            shown = offsetstore_cli(server.address, "describe", group_id, "--output", "json")
            assert shown.returncode == 0, shown.stderr
            partitions = [(p["offset"], p["log_end_offset"], p["lag"]) for p in json.loads(shown.stdout)["partitions"]]
            if partitions == [(50, 50, 0), (50, 50, 0)]:
                break
            assert time.monotonic() < deadline, shown.stdout
            time.sleep(0.5)
        # Step 6: process the last 20 of each partition again; the idle consumer notices and stops.
        reset = offsetstore_cli(
            server.address, "reset", group_id, "--topic", topic.name, "--shift-by", "-20", "--execute"
        )
        assert reset.returncode == 0, reset.stderr
        assert first.wait(timeout=60) == 3, first.communicate()[1]
        assert "fenced" in first.communicate()[1]
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert stored_offsets(engine, group_id) == {(topic.name, 0): 30, (topic.name, 1): 30}

    # Step 7: restarted, it reads from the reset position; the rows read again replace themselves.
    produce(100, 110)
    second = consumer()
    try:
        wait_for({(topic.name, 0): 55, (topic.name, 1): 55}, second)
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=30)
        assert second.returncode == 0, err
    finally:
        if second.poll() is None:
            second.kill()
            second.communicate()
    with engine.connect() as conn:
        orders = conn.exec_driver_sql(f"SELECT order_id, amount FROM {table.name} ORDER BY order_id").all()
    assert [(o, str(a)) for o, a in orders] == [(i, f"{i}.50") for i in range(110)]
    table.assert_exactly_once({(topic.name, p, o) for p in range(2) for o in range(55)})


@pytest.mark.parametrize("fault", ["bootstrap", "topic"])
def test_a_wrong_bootstrap_or_a_missing_topic_is_one_line_not_a_wait(broker, database_url, group_id, fault) -> None:
    bootstrap = f"127.0.0.1:{free_port()}" if fault == "bootstrap" else broker.bootstrap
    command = [
        sys.executable, str(EXAMPLE), "--bootstrap", bootstrap, "--database-url", database_url,
        "--topic", f"missing-{group_id}", "--group", group_id,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("orders_consumer:")]
    assert "Traceback" not in done.stderr
    if fault == "bootstrap":
        assert f"no Kafka broker answered at {bootstrap}" in line and "check --bootstrap" in line
    else:
        assert f"topic missing-{group_id} does not exist on the broker" in line and "check --topic" in line
