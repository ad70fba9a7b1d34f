"""The SQL API's Node consumer (examples/sql/node, kafkajs + pg) against Apache Kafka: SIGKILLs, a zombie, an operator's reset."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest

from tests.fixtures.fix_db import conninfo, stored_offsets
from tests.fixtures.fix_kafka import ConsumerProcess, cli_reset, value
from tests.fixtures.node_example import NODE, npm_installed

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed (examples/sql/node needs node >= 18)"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sql" / "node"
KILLS = 8


@pytest.fixture(scope="module")
def node_modules() -> Path:
    return npm_installed(EXAMPLE, "kafkajs")


def node_command(broker, database_url, group_id, topic, table, *args: str) -> list[str]:
    # A Kafka group of each run's own: Kafka only assigns partitions here, and a killed
    # member would hold its assignment until its session times out.
    return [
        str(NODE), str(EXAMPLE / "consumer.js"), "--bootstrap", broker.bootstrap,
        "--database-url", conninfo(database_url), "--group", group_id, "--topic", topic.name,
        "--table", table.name, "--kafka-group", f"k-{uuid.uuid4().hex[:10]}", *args,
    ]  # fmt: skip


def test_sigkill_at_random_points_writes_every_record_once(
    node_modules, broker, database_url, engine, group_id, make_topic, make_table
):
    topic = make_topic(partitions=3, records=1500)
    table = make_table()
    total = topic.partitions * topic.records
    rng = random.Random()
    progress = []
    for _ in range(KILLS):
        # Most kills land between the rows' INSERT and the COMMIT (--hold), the rest between batches.
        consumer = ConsumerProcess(node_command(broker, database_url, group_id, topic, table, "--hold", "0.15"))
        try:
            consumer.wait_for_line("wrote")
            time.sleep(rng.uniform(0, 0.6))
        finally:
            consumer.kill()
        done = sum(stored_offsets(engine, group_id).values())
        assert done < total, f"the stream ended before kill {len(progress) + 1}: make it longer"
        progress.append(done)
    assert all(a < b for a, b in zip([0, *progress], progress, strict=False)), progress

    consumer = ConsumerProcess(node_command(broker, database_url, group_id, topic, table, "--until-end"))
    try:
        assert consumer.finish(timeout=180) == 0, consumer.output()
    finally:
        consumer.stop()
    table.assert_exactly_once(topic.coordinates())
    assert all(r.value == value(r.partition, r.offset) for r in table.rows())
    assert stored_offsets(engine, group_id) == topic.at_end()


def test_a_zombie_with_an_older_generation_is_fenced_and_writes_nothing(
    node_modules, broker, database_url, engine, group_id, make_topic, make_table
):
    topic = make_topic(partitions=2, records=50)
    table = make_table()
    with engine.begin() as conn:
        old = conn.exec_driver_sql("SELECT offsetstore.join_group(%(g)s)", {"g": group_id}).scalar_one()
        current = conn.exec_driver_sql("SELECT offsetstore.join_group(%(g)s)", {"g": group_id}).scalar_one()
    zombie = ConsumerProcess(
        node_command(broker, database_url, group_id, topic, table, "--generation", str(old), "--until-end")
    )
    try:
        assert zombie.finish(timeout=120) == 3, zombie.output()
    finally:
        zombie.stop()
    assert f"fenced current generation {current}" in zombie.lines, zombie.output()
    assert table.rows() == []
    assert stored_offsets(engine, group_id) == {}


def test_an_operators_reset_fences_the_running_consumer_which_rejoins_from_the_reset(
    node_modules, broker, server, database_url, engine, group_id, make_topic, make_table
):
    topic = make_topic(partitions=3, records=300)
    table = make_table()
    command = node_command(
        broker, database_url, group_id, topic, table, "--batch", "20", "--hold", "0.1", "--on-fenced", "rejoin",
        "--until-end",
    )  # fmt: skip
    consumer = ConsumerProcess(command)
    try:
        old_generation = int(consumer.wait_for_line("joined").split()[1])
        for _ in range(3):
            consumer.wait_for_line("wrote")
        cli_reset(server.address, group_id, topic)
        consumer.wait_for_line("fenced")
        new_generation = int(consumer.wait_for_line("rejoined").split()[1])
        assert consumer.finish(timeout=180) == 0, consumer.output()
    finally:
        consumer.stop()
    assert new_generation > old_generation + 1  # the reset itself moved the generation on
    assert table.rows(f"run = {old_generation}"), "the first generation wrote nothing before the reset"
    # After the rejoin every partition was read again from the reset position, 0, each record once.
    again = [(r.topic, r.partition, r.offset) for r in table.rows(f"run = {new_generation}")]
    assert sorted(again) == sorted(topic.coordinates())
    assert stored_offsets(engine, group_id) == topic.at_end()
