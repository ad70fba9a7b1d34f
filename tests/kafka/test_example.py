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

from offsetstore.kafka_integration import testing

from .conftest import stored_offsets

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "kafka" / "orders_consumer.py"


def test_orders_consumer_example(broker, database_url, engine, group_id, make_topic, make_table):
    topic = make_topic(partitions=2)
    table = make_table(', order_id bigint, amount numeric, PRIMARY KEY (topic, "partition", "offset")')
    producer = Producer(testing.producer_config(broker.bootstrap))
    for i in range(40):
        producer.produce(topic.name, value=json.dumps({"id": i, "amount": f"{i}.50"}).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    command = [
        sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--database-url", database_url,
        "--topic", topic.name, "--group", group_id, "--table", table.name,
        # Tansu assigns after about half the session timeout (librdkafka's default: 45 s).
        "-X", "session.timeout.ms=6000",
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
