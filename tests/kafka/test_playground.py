"""`make demo`, the local playground, runs to its end: broker, orders, the Kafka example, a reset, a restart."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PLAYGROUND = Path(__file__).parents[2] / "examples" / "kafka" / "playground.py"


def test_the_playground_delivers_every_order_once_across_its_reset(database_url, engine, server, group_id):
    table = f"public.playground_{uuid.uuid4().hex[:10]}"
    command = [
        sys.executable, str(PLAYGROUND), "--server", server.address, "--database-url", database_url,
        "--group", group_id, "--topic", f"t-{uuid.uuid4().hex[:10]}", "--table", table,
        "--orders", "60", "--partitions", "2", "--shift-by", "-10",
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "90 orders produced, 90 rows" in done.stdout, done.stdout
        assert "20 orders were read twice" in done.stdout, done.stdout
        with engine.connect() as conn:
            ids = [r[0] for r in conn.exec_driver_sql(f"SELECT order_id FROM {table} ORDER BY order_id")]
        assert ids == list(range(90))
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def test_the_playground_says_what_to_do_without_a_server(database_url):
    command = [sys.executable, str(PLAYGROUND), "--server", "127.0.0.1:1", "--database-url", database_url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "No offsetstore server at 127.0.0.1:1: start one with make run" in done.stderr
