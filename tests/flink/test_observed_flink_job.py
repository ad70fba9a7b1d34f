"""A Flink job committing its Kafka offsets on checkpoints, observed by a real ``offsetstore serve`` (issue 57).

The job is examples/flink/CopyTopicJob (Flink 2.2, flink-connector-kafka's KafkaSource) with
``--commit-to-kafka yes``: ``commit.offsets.on.checkpoint=true``, Flink's default, a checkpoint
each second, the records into a plain JDBC table; offsetstore is no part of the job. The server
observes the job's group (``--observe-kafka-groups``): after each checkpoint the store holds what
Kafka's group coordinator holds (AdminClient) within about one poll interval; the job killed,
the positions are exactly Kafka's and the lag DescribeGroup shows is the log end minus them.
About 40 s, most of it the job's JVM starting.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from offsetstore.client import ChangeKind, OffsetStoreClient
from offsetstore.core.types import TopicPartition
from offsetstore.kafka_integration.local_kafka import KafkaCluster
from tests.fixtures.fix_flink import FlinkJobs, produce
from tests.fixtures.fix_server import start_serve
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.flink, pytest.mark.kafka, pytest.mark.timeout(600)]

PARTITIONS = 2
PER_PARTITION = 20_000
RATE = 400  # records/s per subtask (one partition each): the job is killed long before the topic's end
INTERVAL = 0.5  # the observer's and the watermark reader's poll interval, seconds
CHECKPOINTS = 4  # checkpoints followed before the kill


def kafka_committed(admin: AdminClient, group: str) -> dict[TopicPartition, int]:
    """What Kafka's group coordinator holds for the group (the offsets Flink committed on its checkpoints)."""
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {TopicPartition(p.topic, p.partition): p.offset for p in answer.topic_partitions if p.offset >= 0}


def next_commit(admin: AdminClient, group: str, after: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Kafka's committed offsets of the group once they differ from ``after`` (each partition's there)."""
    found: dict[TopicPartition, int] = {}

    def moved() -> bool:
        found.clear()
        found.update(kafka_committed(admin, group))
        return len(found) == PARTITIONS and found != after

    wait_for(moved, "Flink's commit of the checkpoint in Kafka", 30)
    return found


def stored(client: OffsetStoreClient, group: str) -> dict[TopicPartition, int]:
    try:
        return {tp: o.offset for tp, o in client.fetch_offsets(group).offsets.items()}
    except Exception:  # noqa: BLE001  (not observed yet)
        return {}


def test_a_flink_job_committing_on_checkpoints_is_observed_with_its_lag(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, database_url: str, topic: str, copy_table: str, tmp_path: Path
) -> None:
    kafka_broker.create_topic(topic, PARTITIONS)
    produce(kafka_broker, topic, PARTITIONS, PER_PARTITION)
    group = f"flink-obs-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_broker.client_config())
    served = start_serve(
        tmp_path / "data",
        "--database-url", database_url,
        "--watermarks-kafka-bootstrap", kafka_broker.bootstrap,
        "--watermarks-kafka-interval", f"{INTERVAL}s",
        "--observe-kafka-groups", group,
        "--observe-kafka-interval", f"{INTERVAL}s",
    )  # fmt: skip
    try:
        with OffsetStoreClient(served.address, timeout=10) as client:
            run = flink_jobs.start(
                topic=topic, group=group, table=copy_table, checkpoints=tmp_path / "checkpoints", sink="jdbc",
                commit_to_kafka="yes", interval_ms=1000, rate=RATE,
            )  # fmt: skip
            seen: list[dict[TopicPartition, int]] = []
            delays = []
            while len(seen) < CHECKPOINTS:
                run.wait_line(r"checkpoint \d+ complete")
                # Flink commits to Kafka right after it completes the checkpoint, asynchronously: Kafka's new offsets.
                held = next_commit(admin, group, seen[-1] if seen else {})
                seen.append(held)
                # The store reaches what Kafka held (or a later commit of the job's, read since).
                delays.append(
                    wait_for(
                        lambda want=held: (
                            (got := stored(client, group)).keys() == want.keys()
                            and all(got[tp] >= want[tp] for tp in want)
                        ),
                        "the checkpoint's commit observed",
                        30,
                    )
                )
            run.kill()

            # The job gone, its last commit stays in Kafka: the store holds exactly that.
            final = kafka_committed(admin, group)
            delays.append(wait_for(lambda: stored(client, group) == final, "the last commit observed", 30))
            print(
                f"observed within {max(delays):.2f} s of each of {len(delays)} commits "
                f"({', '.join(f'{d:.2f}' for d in delays)} s; poll interval {INTERVAL} s)"
            )
            assert max(delays) <= 10 * INTERVAL + 2  # a loaded machine's slack; the printed delay is the claim
            assert all(0 < offset < PER_PARTITION for offset in final.values()), final  # mid-topic: the lag is real

            # The lag, once the watermark reader knows the log ends: log end minus Kafka's committed offset.
            wait_for(
                lambda: all(p.log_end_offset == PER_PARTITION for p in client.describe_group(group).partitions),
                "the log ends known",
                30,
            )
            described = client.describe_group(group)
            assert described.observed and described.observed_source.startswith("kafka:")
            assert described.observed_source.endswith(f"/{group}")
            lags = {TopicPartition(p.topic, p.partition): p.lag for p in described.partitions}
            assert lags == {tp: PER_PARTITION - offset for tp, offset in final.items()}
            assert all(p.lag == p.log_end_offset - p.offset for p in described.partitions)
            print(f"lag {lags} = log end {PER_PARTITION} - Kafka's committed {final}")

            # Each checkpoint's commit a move of the history, kind OBSERVED, in order, ending at Kafka's offsets.
            history = list(reversed(client.list_offset_history(group, page_size=1000).items))
            assert {c.kind for c in history} == {ChangeKind.OBSERVED}
            for tp, offset in final.items():
                moves = [c.new_offset for c in history if (c.topic, c.partition) == (tp.topic, tp.partition)]
                assert moves == sorted(set(moves)) and moves[-1] == offset
                # Several moves, one per poll that found a new checkpoint's commit (two close ones read as one).
                assert len(moves) >= 2, moves
    finally:
        assert served.terminate() == 0, served.output()
