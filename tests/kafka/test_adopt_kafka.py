"""Issue 49's takeover on Apache Kafka: a legacy at-least-once consumer killed between its write and its commit,
``groups adopt --from-kafka-group``, and the exactly-once consumer on the same table; earliest and latest are caught."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from offsetstore.cli import _broker
from tests.fixtures.fix_kafka import ConsumerProcess, SinkTable, Topic, consumer_command
from tests.fixtures.takeover import Takeover, check_takeover
from tests.fixtures.waits import wait_for

LEGACY = Path(__file__).with_name("legacy_consumer.py")
BATCH = 50


def legacy_run(
    broker, database_url: str, kafka_group: str, topic: Topic, table: SinkTable
) -> dict[tuple[str, int], int]:
    """Runs the legacy consumer until it holds its 4th poll written but not committed, kills it; returns
    the offsets its Kafka group had committed (what a correct takeover starts from)."""
    legacy = ConsumerProcess(
        [
            sys.executable,
            str(LEGACY),
            "--bootstrap",
            broker.bootstrap,
            "--database-url",
            database_url,
            "--group",
            kafka_group,
            "--topic",
            topic.name,
            "--table",
            table.name,
            "--batch",
            str(BATCH),
            "--hold-after",
            "4",
        ]  # fmt: skip
    )
    try:
        legacy.wait_for_line("holding", timeout=120)
        legacy.kill()
    finally:
        legacy.stop()
    # A killed consumer is a member until its session times out: adopt refuses until then.
    wait_for(lambda: _broker.group_members(broker.bootstrap, kafka_group) == 0, "the killed consumer's session to end")
    committed = _broker.group_offsets(broker.bootstrap, kafka_group)
    return {(tp.topic, tp.partition): offset for tp, offset in committed.items()}


def successor_run(broker, database_url: str, group_id: str, topic: Topic, table: SinkTable) -> None:
    successor = ConsumerProcess(consumer_command(broker, database_url, group_id, topic, table, "--batch", str(BATCH)))
    try:
        assert successor.finish(timeout=180) == 0, successor.output()
    finally:
        successor.stop()


def rows_of(table: SinkTable) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.offset, r.run) for r in table.rows()]


@pytest.fixture
def scenario(broker, database_url, group_id, make_topic, make_table, groups):
    """(topic, table, the Kafka group's committed offsets) after a legacy run killed mid-poll."""
    topic = make_topic(partitions=3, records=200)
    table = make_table()
    kafka_group = f"legacy-{group_id}"
    committed = legacy_run(broker, database_url, kafka_group, topic, table)
    assert committed, "the legacy consumer committed nothing before it was killed"
    return topic, table, kafka_group, committed


@pytest.mark.slow
def test_adopting_a_kafka_groups_offsets_hands_over_exactly_once(
    broker, database_url, group_id, groups, scenario
) -> None:
    topic, table, kafka_group, committed = scenario
    dry = groups("adopt", group_id, "--from-kafka-group", kafka_group, "--bootstrap-server", broker.bootstrap)
    assert dry.code == 0, dry.err
    assert "Dry run: nothing changed" in dry.out
    done = groups(
        "adopt", group_id, "--from-kafka-group", kafka_group, "--bootstrap-server", broker.bootstrap, "--execute"
    )
    assert done.code == 0, done.err

    successor_run(broker, database_url, group_id, topic, table)

    takeover = check_takeover(rows_of(table), topic.coordinates(), committed, BATCH)
    # The legacy consumer's last poll was written and never committed: the successor writes it again.
    assert 0 < takeover.duplicates <= BATCH
    assert takeover.legacy_rows + takeover.successor_rows - takeover.duplicates == len(topic.coordinates())
    # The counts the closing note gives (capsys holds sys.stdout for the CLI's output).
    print(f"adoption takeover (Kafka group): {takeover}, handed over {committed}", file=sys.__stderr__)
    history = groups("history", group_id, "--output", "json").json()
    assert {c["kind"] for c in history["changes"]} >= {"CHANGE_KIND_ADOPT"}
    assert {c["source"] for c in history["changes"] if c["kind"] == "CHANGE_KIND_ADOPT"} == {
        f"kafka group {kafka_group} at {broker.bootstrap}"
    }


@pytest.mark.slow
@pytest.mark.parametrize(("boundary", "caught"), [("--to-earliest", "an overlap"), ("--to-latest", "a gap")])
def test_starting_at_earliest_or_latest_instead_is_caught_by_the_same_check(
    broker, database_url, group_id, groups, scenario, boundary: str, caught: str
) -> None:
    topic, table, _, committed = scenario
    partitions = ",".join(str(p) for p in range(topic.partitions))
    reset = groups("reset", group_id, "--topic", f"{topic.name}:{partitions}", boundary, "--execute")
    assert reset.code == 0, reset.err

    successor_run(broker, database_url, group_id, topic, table)

    with pytest.raises(AssertionError, match=caught):
        check_takeover(rows_of(table), topic.coordinates(), committed, BATCH)


def test_an_adoption_with_a_bootstrap_server_reports_the_log_ends_it_read(
    broker, client, group_id, groups, make_topic, tmp_path
) -> None:
    """Issue 59: right after the adoption the group read UNCONFIRMED "no log end known", though adopt had read them."""
    topic = make_topic(partitions=2, records=30)
    plan = tmp_path / "positions.csv"
    plan.write_text(f"{topic.name},0,10\n{topic.name},1,30\n")

    done = groups("adopt", group_id, "--from-file", str(plan), "--bootstrap-server", broker.bootstrap, "--execute")
    assert done.code == 0, done.err

    described = client.describe_group(group_id)
    assert {(p.partition, p.log_start_offset, p.log_end_offset) for p in described.partitions} == {
        (0, 0, 30),
        (1, 0, 30),
    }
    state = groups("describe", group_id, "--state", "--output", "json").json()
    assert state["status"] != "UNCONFIRMED", state
    # Partition 0 waits 20 records for its consumer; the reason says it is an adoption's, not a consumer's offset.
    assert "no consumer commit since: waiting for the consumer, lag 20" in state["status_reason"], state
    assert f"Reported the log start and end of 2 partition(s), read from {broker.bootstrap}" in done.out


def test_the_check_counts_what_it_lets_through() -> None:
    """Unit: the legacy writer's own uncommitted poll is counted and let through; nothing else is."""
    expected = {("t", 0, o) for o in range(10)}
    legacy = [("t", 0, o, 0) for o in range(6)]  # committed 4, wrote 4 and 5 after
    successor = [("t", 0, o, 7) for o in range(4, 10)]
    assert check_takeover(legacy + successor, expected, {("t", 0): 4}, bound=2) == Takeover(6, 6, 2)
    with pytest.raises(AssertionError, match="more than one poll"):
        check_takeover(legacy + successor, expected, {("t", 0): 4}, bound=1)
