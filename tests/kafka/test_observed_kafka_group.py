"""A consumer group committing to Apache Kafka, observed by a real ``offsetstore serve`` (issue 57, items 1 and 3).

The consumer is confluent-kafka's, auto-commit off, committing after it processed a batch. The
server lists the group (``--observe-kafka-groups``), reads its committed offsets every 0.3 s and
records each move as CHANGE_KIND_OBSERVED; the watermark reader gives it lag and a verdict. Then
the group stops (right after a commit), its offsets are deleted with Kafka's own tool, the store
flags the group and keeps its last positions, ``groups export --to-kafka-group`` puts them back,
and the group resumes: every record processed once, none lost, none twice.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition

from offsetstore.cli import main as cli
from offsetstore.client import ChangeKind, OffsetStoreClient
from offsetstore.core.types import GroupStatus, TopicPartition
from tests.fixtures.fix_kafka import produce
from tests.fixtures.fix_server import start_serve
from tests.fixtures.waits import wait_for

pytestmark = pytest.mark.kafka

INTERVAL = 0.3
PARTITIONS, RECORDS = 2, 30


def kafka_committed(broker, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets as Kafka's own tool shows them (kafka-consumer-groups --describe)."""
    out = broker.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    found = {}
    for line in out.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0] == group and cells[3].isdigit():
            found[TopicPartition(cells[1], int(cells[2]))] = int(cells[3])
    return found


def stored(client: OffsetStoreClient, group: str) -> dict[TopicPartition, int]:
    try:
        return {tp: o.offset for tp, o in client.fetch_offsets(group).offsets.items()}
    except Exception:  # noqa: BLE001  (not there yet)
        return {}


class Pipeline:
    """A consumer that processes records and commits to Kafka after processing them, one batch at a time."""

    def __init__(self, broker, group: str, topic: str) -> None:
        self.consumer = Consumer(
            broker.client_config(**{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        )
        self.consumer.subscribe([topic])
        self.processed: list[tuple[int, int]] = []

    def process(self, count: int, timeout: float = 60) -> None:
        """Processes ``count`` records (or up to the end of the log), then commits what it processed."""
        deadline = time.monotonic() + timeout
        taken = 0
        while taken < count and time.monotonic() < deadline:
            message = self.consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            self.processed.append((message.partition(), message.offset()))
            taken += 1
        assert taken == count, f"processed {taken} of {count}"
        self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        self.consumer.close()  # leaves the group at once (the classic protocol's LeaveGroup)


def test_a_kafka_group_is_observed_flagged_when_its_offsets_are_deleted_and_reseeded(
    broker, make_topic, database_url: str, tmp_path: Path, capsys
) -> None:
    topic = make_topic(partitions=PARTITIONS, records=RECORDS)
    group = f"obs-{uuid.uuid4().hex[:10]}"
    served = start_serve(
        tmp_path / "data",
        "--database-url", database_url,
        "--watermarks-kafka-bootstrap", broker.bootstrap,
        "--watermarks-kafka-interval", f"{INTERVAL}s",
        "--observe-kafka-groups", group,
        "--observe-kafka-interval", f"{INTERVAL}s",
        "--status-window", "3s",
    )  # fmt: skip
    try:
        with OffsetStoreClient(served.address, timeout=10) as client:
            pipeline = Pipeline(broker, group, topic.name)
            delays = []
            for batch in (10, 14, 8):
                pipeline.process(batch)
                committed = {
                    TopicPartition(p.topic, p.partition): p.offset
                    for p in pipeline.consumer.committed(
                        [KafkaPartition(topic.name, p) for p in range(PARTITIONS)], timeout=10
                    )
                    if p.offset >= 0
                }
                delays.append(wait_for(lambda want=committed: stored(client, group) == want, "the commit observed", 30))
            # What Kafka's own tool shows is what the store holds.
            assert kafka_committed(broker, group) == stored(client, group)
            with capsys.disabled():
                print(f"\nobserved within {max(delays):.2f} s of each commit (poll interval {INTERVAL} s)")
            assert max(delays) <= 10 * INTERVAL + 2  # a loaded machine's slack; the printed delay is the claim

            described = client.describe_group(group)
            assert described.observed and described.observed_source.endswith(f"/{group}")
            assert described.observed_source.startswith("kafka:")
            # The history: every committed move of each partition, in order, each CHANGE_KIND_OBSERVED.
            history = list(reversed(client.list_offset_history(group, page_size=1000).items))
            assert {c.kind for c in history} == {ChangeKind.OBSERVED}
            assert {c.actor for c in history} == {"offsetstore"}
            for p in range(PARTITIONS):
                moves = [c.new_offset for c in history if c.partition == p]
                assert moves == sorted(set(moves)) and moves[-1] == stored(client, group)[TopicPartition(topic.name, p)]

            # Stopped right after a commit: its positions stay, the log moves on, the group reads STOPPED.
            pipeline.close()
            produce(broker.bootstrap, topic.name, PARTITIONS, RECORDS + 5, start=RECORDS)
            # (and the log ends past it: a partition the group had caught up on reads lag 0 until they are read)
            wait_for(
                lambda: (
                    (d := client.describe_group(group)).status is GroupStatus.STOPPED
                    and all(p.log_end_offset == RECORDS + 5 for p in d.partitions)
                ),
                "the stopped group read STOPPED, the log ends moved on",
            )
            described = client.describe_group(group)
            assert all(p.lag == p.log_end_offset - p.offset > 0 for p in described.partitions)

            # Kafka's own tool deletes the group's offsets: the store flags it and keeps the last positions.
            before = stored(client, group)
            broker.tool("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--delete", "--group", group)
            assert kafka_committed(broker, group) == {}
            wait_for(lambda: client.describe_group(group).observed_lost_partitions == PARTITIONS, "the loss flagged")
            assert stored(client, group) == before
            capsys.readouterr()
            assert cli.main(["groups", "list", "--prefix", group, "--server", served.address]) == 0
            assert f"(LOST:{PARTITIONS})" in capsys.readouterr().out

            # Re-seeded from the store, the flag clears and the group resumes where it stopped.
            code = cli.main(
                ["groups", "export", group, "--to-kafka-group", group, "--bootstrap-server", broker.bootstrap,
                 "--execute", "--server", served.address]
            )  # fmt: skip
            assert code == 0, capsys.readouterr()
            assert kafka_committed(broker, group) == before
            wait_for(lambda: client.describe_group(group).observed_lost_partitions == 0, "the flag cleared")
            resumed = Pipeline(broker, group, topic.name)
            resumed.process(PARTITIONS * (RECORDS + 5) - len(pipeline.processed))
            resumed.close()
    finally:
        assert served.terminate() == 0, served.output()
    everything = pipeline.processed + resumed.processed
    expected = {(p, o) for p in range(PARTITIONS) for o in range(RECORDS + 5)}
    lost = expected - set(everything)
    duplicates = len(everything) - len(set(everything))
    with capsys.disabled():
        print(f"re-seeded: {len(pipeline.processed)} before, {len(resumed.processed)} after; lost {len(lost)}, "
              f"duplicates {duplicates}")  # fmt: skip
    assert (len(lost), duplicates) == (0, 0)


def test_a_round_shares_its_positions_between_groups_and_never_overwrites_a_committed_group(
    broker, make_topic, store, client
) -> None:
    from prometheus_client import CollectorRegistry

    from offsetstore.cli import _broker
    from offsetstore.server.kafka_groups import KafkaGroupObserver

    topic = make_topic(partitions=6, records=10)
    prefix = f"share-{uuid.uuid4().hex[:8]}-"
    big, small, committed = prefix + "big", prefix + "small", prefix + "mine"
    _broker.set_group_offsets(broker.bootstrap, big, {TopicPartition(topic.name, p): 5 for p in range(6)})
    _broker.set_group_offsets(broker.bootstrap, small, {TopicPartition(topic.name, 0): 7})
    _broker.set_group_offsets(broker.bootstrap, committed, {TopicPartition(topic.name, 0): 9})
    client.commit_offsets(committed, {(topic.name, 0): 3})  # its writers commit to offsetstore
    registry = CollectorRegistry()
    observer = KafkaGroupObserver(
        store, broker.bootstrap, [prefix], max_partitions=3, registry=registry, request_seconds=5
    ).start_client()
    # Three positions a round, one per group: the big group takes its share, never the small one's.
    assert observer.round() == 2
    assert len(client.describe_group(big).partitions) == 1
    assert [(p.partition, p.offset) for p in client.describe_group(small).partitions] == [(0, 7)]
    rounds = 1
    while len(client.describe_group(big).partitions) < 6:
        observer.round()
        rounds += 1
    assert rounds == 6
    assert client.fetch_offsets(committed).offsets[TopicPartition(topic.name, 0)].offset == 3
    assert not client.describe_group(committed).observed
    assert registry.get_sample_value("offsetstore_kafka_groups_failures_total", {"reason": "committed"}) >= 1
    assert registry.get_sample_value("offsetstore_kafka_groups_observed_positions_total") == 7
