"""Fixtures of the Kafka consumer tests: a Tansu broker for the session, topics with records, sink tables."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

pytest.importorskip("confluent_kafka", reason="the kafka extra (confluent-kafka) is not installed")

from exactly_once import assert_exactly_once

from offsetstore.kafka_integration import testing  # noqa: E402

CONSUMER = Path(__file__).with_name("consumer_process.py")


@pytest.fixture(scope="session")
def broker() -> Iterator[testing.TansuBroker]:
    """A Tansu broker on a free port for the whole session (in-memory: each test makes its own topics)."""
    try:
        testing.broker_binary()
    except testing.BrokerNotFound as e:
        pytest.skip(f"no Tansu broker binary: {e}")
    with testing.TansuBroker() as broker:
        yield broker


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int
    records: int  # per partition

    def coordinates(self) -> set[tuple[str, int, int]]:
        return {(self.name, p, o) for p in range(self.partitions) for o in range(self.records)}

    def at_end(self) -> dict[tuple[str, int], int]:
        return {(self.name, p): self.records for p in range(self.partitions)}


def value(partition: int, offset: int) -> str:
    """The value produced at (partition, offset), so a test can check a row came from its record."""
    return f"p{partition}-o{offset}"


def produce(bootstrap: str, topic: str, partitions: int, records: int, *, start: int = 0) -> None:
    """Records ``start..records-1`` into every partition, one record per batch (exact watermarks on Tansu)."""
    from confluent_kafka import Producer

    producer = Producer(testing.producer_config(bootstrap))
    for offset in range(start, records):
        for p in range(partitions):
            producer.produce(topic, value=value(p, offset).encode(), partition=p)
        producer.poll(0)
    left = producer.flush(30)
    assert left == 0, f"{left} records not delivered"


@pytest.fixture
def make_topic(broker: testing.TansuBroker) -> Callable[..., Topic]:
    """Creates a topic of its own with ``records`` records in each partition."""

    def make(partitions: int = 3, records: int = 0) -> Topic:
        name = f"t-{uuid.uuid4().hex[:10]}"
        testing.create_topic(broker.bootstrap, name, partitions)
        if records:
            produce(broker.bootstrap, name, partitions, records)
        return Topic(name, partitions, records)

    return make


SINK_TABLE = """
CREATE TABLE {table} (
    topic text NOT NULL,
    "partition" integer NOT NULL,
    "offset" bigint NOT NULL,
    value text,
    run bigint{extra}
)
"""


@dataclass
class SinkTable:
    engine: sa.Engine
    name: str

    def coordinates(self) -> list[tuple[str, int, int]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(f'SELECT topic, "partition", "offset" FROM {self.name}')]

    def rows(self, where: str = "true") -> list[sa.Row]:
        with self.engine.connect() as conn:
            return conn.exec_driver_sql(
                f'SELECT topic, "partition", "offset", value, run FROM {self.name} WHERE {where} '
                'ORDER BY topic, "partition", "offset"'
            ).all()

    def assert_exactly_once(self, expected: set[tuple[str, int, int]]) -> None:
        """Every expected record is in the table once, and nothing else is."""
        assert_exactly_once(self.coordinates(), expected)


@pytest.fixture
def make_table(engine: sa.Engine) -> Iterator[Callable[..., SinkTable]]:
    """Creates sink tables (``extra`` adds column definitions or constraints); drops them after."""
    made: list[str] = []

    def make(extra: str = "") -> SinkTable:
        name = f"public.kafka_sink_{uuid.uuid4().hex[:10]}"
        with engine.begin() as conn:
            conn.exec_driver_sql(SINK_TABLE.format(table=name, extra=extra))
        made.append(name)
        return SinkTable(engine, name)

    yield make
    with engine.begin() as conn:
        for name in made:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def stored_offsets(engine: sa.Engine, group_id: str) -> dict[tuple[str, int], int]:
    """The group's stored offsets, read from the store's table."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            'SELECT topic, "partition", "offset" FROM offsetstore.offsets WHERE group_id = %(g)s', {"g": group_id}
        ).all()
    return {(t, p): o for t, p, o in rows}


def consumer_command(
    broker: testing.TansuBroker, database_url: str, group_id: str, topic: Topic, table: SinkTable, *args: str
) -> list[str]:
    return [
        sys.executable, str(CONSUMER), "--bootstrap", broker.bootstrap, "--database-url", database_url,
        "--group", group_id, "--topic", topic.name, "--partitions", str(topic.partitions), "--table", table.name,
        *args,
    ]  # fmt: skip


class ConsumerProcess:
    """A consumer_process.py run; its stdout lines are collected as they come."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []

    def wait_for_line(self, prefix: str, timeout: float = 60) -> str:
        """Reads output until a line starting with ``prefix``; AssertionError if the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"consumer exited ({self.proc.wait()}) before {prefix!r}: {self.output()}")
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line.strip()
        raise AssertionError(f"no {prefix!r} line within {timeout}s: {self.output()}")

    def finish(self, timeout: float = 120) -> int:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines.extend(out.splitlines())
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, and collect what it printed."""
        self.proc.kill()
        self.finish(timeout=30)

    def stop(self) -> None:
        """Kills it if still running and releases its pipe (for ``finally``)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def output(self) -> str:
        return "\n".join(self.lines[-40:])
