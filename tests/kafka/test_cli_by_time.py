"""``groups reset --to-datetime/--by-duration --bootstrap-server``: Kafka's meaning, record timestamps, on a real broker."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer

from offsetstore.cli import groups as cli
from tests.fixtures.fix_server import free_port

pytestmark = pytest.mark.kafka

BASE = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def produce_at(broker, topic: str, partition: int, minutes: list[int]) -> None:
    """One record per minute given, with that record timestamp (CreateTime, the topic's default), batched."""
    producer = Producer(broker.producer_config())
    for m in minutes:
        stamp = int((BASE + timedelta(minutes=m)).timestamp() * 1000)
        producer.produce(topic, value=b"x", partition=partition, timestamp=stamp)
    assert producer.flush(30) == 0


def make_old_topic(broker, partitions: int) -> str:
    """A topic without time retention: its records are stamped 2024, which retention.ms's 7 days would delete."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.create_topic(name, partitions, retention_ms="-1")
    return name


def run(server, capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main([*argv, "--server", server.address])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_to_datetime_with_a_bootstrap_server_resolves_record_timestamps(
    broker, server, client, group_id, capsys
) -> None:
    topic = make_old_topic(broker, 2)
    produce_at(broker, topic, 0, [0, 10, 20, 30])  # offsets 0..3
    produce_at(broker, topic, 1, [5, 25])  # offsets 0..1
    client.commit_offsets(group_id, {(topic, 0): 4, (topic, 1): 2})

    # 12:15: partition 0's first record at or after it is offset 2 (12:20), partition 1's is offset 1 (12:25).
    code, out, err = run(
        server, capsys, "reset", group_id, "--topic", topic, "--to-datetime", "2024-03-01T12:15:00Z",
        "--bootstrap-server", broker.bootstrap, "--output", "json",
    )  # fmt: skip
    assert code == 0, err
    assert [(c["partition"], c["new_offset"]) for c in json.loads(out)["changes"]] == [(0, 2), (1, 1)]
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {
        (topic, 0): 4,
        (topic, 1): 2,
    }  # a dry run

    before = client.fetch_offsets(group_id).generation
    code, out, err = run(
        server, capsys, "reset", group_id, "--topic", topic, "--to-datetime", "2024-03-01T12:15:00Z",
        "--bootstrap-server", broker.bootstrap, "--execute",
    )  # fmt: skip
    assert code == 0, err
    assert "first record with a timestamp at or after 2024-03-01T12:15:00.000Z" in out
    fetched = client.fetch_offsets(group_id)
    assert {tp: o.offset for tp, o in fetched.offsets.items()} == {(topic, 0): 2, (topic, 1): 1}
    assert fetched.generation > before  # live writers are fenced, as by every reset


def test_a_time_after_every_record_goes_to_the_log_end_and_a_whole_topic_is_every_partition(
    broker, server, client, group_id, capsys
) -> None:
    topic = make_old_topic(broker, 3)
    produce_at(broker, topic, 0, [0, 1, 2])
    produce_at(broker, topic, 2, [0])
    # A new group: the broker names the partitions of the whole topic, as kafka-consumer-groups does.
    code, out, err = run(
        server, capsys, "reset", group_id, "--topic", topic, "--by-duration", "1h",
        "--bootstrap-server", broker.bootstrap, "--execute",
    )  # fmt: skip
    assert code == 0, err
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {
        (topic, 0): 3,
        (topic, 1): 0,
        (topic, 2): 1,
    }
    assert f"Created group {group_id}" in out


def test_an_unknown_topic_on_the_broker_is_a_clear_error(broker, server, client, group_id, capsys) -> None:
    code, _, err = run(
        server, capsys, "reset", group_id, "--topic", "no-such-topic-here", "--by-duration", "1h",
        "--bootstrap-server", broker.bootstrap,
    )  # fmt: skip
    assert code == 1
    assert "no-such-topic-here does not exist on the broker" in err


def test_a_wrong_bootstrap_address_is_one_line_naming_it(server, group_id, capsys) -> None:
    wrong = f"127.0.0.1:{free_port()}"  # nothing listens there
    code, out, err = run(
        server, capsys, "reset", group_id, "--topic", "orders", "--by-duration", "1h", "--bootstrap-server", wrong,
    )  # fmt: skip
    assert code == 1
    assert f"the broker at {wrong} did not answer" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
