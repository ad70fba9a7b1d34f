"""Consumer processes against Apache Kafka and PostgreSQL: SIGKILLs at random points, a takeover, a reset from the CLI."""

from __future__ import annotations

import random
import time

import pytest

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_kafka import ConsumerProcess, cli_reset, consumer_command, value

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KILLS = 10


def test_sigkill_at_random_points_delivers_every_message_exactly_once(
    broker, database_url, engine, group_id, make_topic, make_table
):
    topic = make_topic(partitions=3, records=1500)
    table = make_table()
    total = topic.partitions * topic.records
    # Small batches, each transaction held open a little: most kills land between the
    # rows' write and the COMMIT, the rest between batches. Each run is killed at a
    # random instant after its first committed batch, so every kill hits a consumer
    # in full flow (a kill during start-up would prove little).
    command = consumer_command(broker, database_url, group_id, topic, table, "--batch", "50", "--hold", "0.15")
    rng = random.Random()
    progress = []
    for _ in range(KILLS):
        consumer = ConsumerProcess(command)
        try:
            consumer.wait_for_line("wrote")
            time.sleep(rng.uniform(0, 0.6))
        finally:
            consumer.kill()
        done = sum(stored_offsets(engine, group_id).values())
        assert done < total, f"the stream ended before kill {len(progress) + 1}: make it longer"
        progress.append(done)
    # "wrote" is printed after a COMMIT: each run moved the stored offsets on.
    assert all(a < b for a, b in zip([0, *progress], progress, strict=False)), progress

    consumer = ConsumerProcess(command)
    assert consumer.finish() == 0, consumer.output()
    table.assert_exactly_once(topic.coordinates())
    assert all(r.value == value(r.partition, r.offset) for r in table.rows())
    assert stored_offsets(engine, group_id) == topic.at_end()


def test_a_second_consumer_takes_over_and_fences_the_first(
    broker, database_url, engine, group_id, make_topic, make_table, tmp_path
):
    topic = make_topic(partitions=3, records=400)
    table = make_table()
    command = consumer_command(broker, database_url, group_id, topic, table, "--batch", "20")
    # The first waits after its first batch until the second has joined: it cannot finish the
    # stream before a slow second start (which made it exit 0 instead of being fenced).
    second_joined = tmp_path / "second-joined"
    first = ConsumerProcess([*command, "--hold", "0.1", "--after-first-wait-for", str(second_joined)])
    try:
        first_generation = int(first.wait_for_line("joined").split()[1])
        first.wait_for_line("wrote")
        second = ConsumerProcess(command)
        try:
            second_generation = int(second.wait_for_line("joined").split()[1])
            second_joined.touch()
            assert first.finish() == 3, first.output()
            assert first.lines[-1].startswith("fenced"), first.output()
            assert second.finish() == 0, second.output()
        finally:
            second.stop()
    finally:
        first.stop()
    assert second_generation > first_generation
    table.assert_exactly_once(topic.coordinates())
    assert {r.run for r in table.rows()} == {first_generation, second_generation}
    assert stored_offsets(engine, group_id) == topic.at_end()


def test_a_cli_reset_fences_the_running_consumer_which_resumes_from_the_reset(
    broker, server, database_url, engine, group_id, make_topic, make_table
):
    topic = make_topic(partitions=3, records=300)
    table = make_table()
    command = consumer_command(broker, database_url, group_id, topic, table, "--batch", "20")
    consumer = ConsumerProcess([*command, "--hold", "0.1"])
    try:
        old_generation = int(consumer.wait_for_line("joined").split()[1])
        for _ in range(3):
            consumer.wait_for_line("wrote")
        cli_reset(server.address, group_id, topic)
        assert consumer.finish() == 3, consumer.output()
        assert consumer.lines[-1].startswith("fenced"), consumer.output()
    finally:
        consumer.stop()
    assert table.rows(f"run = {old_generation}"), "the first run wrote nothing before the reset"

    restarted = ConsumerProcess(command)
    try:
        new_generation = int(restarted.wait_for_line("joined").split()[1])
        assert restarted.finish() == 0, restarted.output()
    finally:
        restarted.stop()
    # The restarted run read every partition again from offset 0, the reset position, each record once.
    new_rows = table.rows(f"run = {new_generation}")
    again = [(r.topic, r.partition, r.offset) for r in new_rows]
    assert sorted(again) == sorted(topic.coordinates())
    assert new_generation > old_generation + 1  # the reset itself moved the generation on
    assert stored_offsets(engine, group_id) == topic.at_end()
