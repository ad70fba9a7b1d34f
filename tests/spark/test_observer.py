"""The Spark observer on the real pieces: Spark 4.2's ``format("kafka")`` on Apache Kafka, writing Parquet with its own checkpoint.

One observed run and the same query unobserved are made once for the module (two queries of a
few batches each); the tests read them. A listener registered after the observer's checks the
store on every batch, from Spark's listener bus, where the observer has just written.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import confluent_kafka
import pytest
from prometheus_client import CollectorRegistry

from offsetstore import storage
from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import ChangeKind, GroupStatus, TopicPartition, Watermark
from offsetstore.spark_integration import observe, starting_offsets_at
from offsetstore.storage.status import StatusRules
from tests.fixtures.fix_server import all_history
from tests.fixtures.fix_spark import wait_for
from tests.fixtures.fix_spark_kafka import kafka_source, make_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.kafka, pytest.mark.timeout(900)]

PARTITIONS = 3
#: Offsets 0..END of each partition are in Kafka before the queries start.
END = 300
#: Records per batch over all partitions: END * PARTITIONS / PER_TRIGGER batches.
PER_TRIGGER = 300
COLUMNS = ["topic", "partition", "offset", "key", "value"]


def checkpoint_offsets(checkpoint: Path, batch: int) -> dict[TopicPartition, int]:
    """The Kafka offsets of ``offsets/<batch>``: a version line, batch metadata, then one JSON line per source."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    found: dict[TopicPartition, int] = {}
    for line in lines[2:]:
        for topic, parts in json.loads(line).items():
            found.update({TopicPartition(topic, int(p)): o for p, o in parts.items()})
    return found


def batches(checkpoint: Path, log: str) -> list[int]:
    folder = checkpoint / log
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit()) if folder.exists() else []


def files(checkpoint: Path) -> set[str]:
    """Every file of a checkpoint, by relative path (Spark's .crc files included)."""
    return {str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file()}


@dataclass
class Seen:
    """What the checking listener saw after one batch's event, right after the observer's turn."""

    batch: int
    at: datetime
    store: dict[TopicPartition, int]
    checkpoint: dict[TopicPartition, int]
    committed: list[int]
    lag: dict[TopicPartition, tuple[int, int]]  # (log end, lag)


@dataclass
class Checker:
    """Reads the store and the checkpoint on each progress event of ``name`` (Spark calls listeners in order)."""

    client: OffsetStoreClient
    group_id: str
    name: str
    checkpoint: Path
    seen: list[Seen] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def on_progress(self, progress) -> None:
        if progress["name"] != self.name:
            return
        try:
            batch = progress["batchId"]
            at = datetime.now(UTC)
            store = {tp: o.offset for tp, o in self.client.fetch_offsets(self.group_id).offsets.items()}
            described = self.client.describe_group(self.group_id).partitions
            lag = {TopicPartition(p.topic, p.partition): (p.log_end_offset, p.lag) for p in described}
            self.seen.append(
                Seen(
                    batch,
                    at,
                    store,
                    checkpoint_offsets(self.checkpoint, batch),
                    batches(self.checkpoint, "commits"),
                    lag,
                )
            )
        except BaseException as error:  # the bus would only log it; the test reads it
            self.errors.append(error)


def add_listener(spark, on_progress):
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            on_progress(event.progress)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = Listener()
    spark.streams.addListener(listener)
    return listener


def run_to_parquet(spark, bootstrap: str, topic: str, out: Path, checkpoint: Path, name: str, **options) -> None:
    """The query under test, to the end of what Kafka has: Kafka source, Parquet sink, its own checkpoint."""
    query = (
        kafka_source(spark, bootstrap, topic, **options)
        .selectExpr("topic", "partition", "offset", "key", "value")
        .writeStream.queryName(name)
        .format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300), f"{name} did not finish"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()


def parquet_rows(spark, out: Path) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(str(out)).select(*COLUMNS).collect())


def kafka_groups_on(kafka, topic: str) -> dict[str, list[int]]:
    """Every Kafka consumer group that has committed offsets on ``topic``: {group: partitions}."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_config())
    groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid]
    found: dict[str, list[int]] = {}
    for group in groups:
        request = [ConsumerGroupTopicPartitions(group)]
        for future in admin.list_consumer_group_offsets(request, request_timeout=30).values():
            try:
                listed = future.result().topic_partitions
            except KafkaException:  # another test's group, deleted since it was listed
                continue
            parts = [tp.partition for tp in listed if tp.topic == topic and tp.offset >= 0]
            if parts:
                found[group] = parts
    return found


@dataclass
class Runs:
    topic: str
    group_id: str
    observed: Path
    unobserved: Path
    seen: list[Seen]
    observer: object
    registry: CollectorRegistry
    #: Wall time of the two queries.
    seconds: float


@pytest.fixture(scope="module")
def kafka(kafka_connector_jars, kafka_broker, spark):
    return kafka_broker


@pytest.fixture(scope="module")
def runs(kafka, spark, server, client, tmp_path_factory) -> Runs:
    """The query observed, then the same query unobserved (same topic, new output and checkpoint)."""
    topic, group_id = f"t-{uuid.uuid4().hex[:12]}", f"g-{uuid.uuid4().hex[:12]}"
    base = tmp_path_factory.mktemp("observer")
    make_topic(kafka, topic, PARTITIONS)
    produce(kafka, topic, PARTITIONS, 0, END)

    started = time.monotonic()
    registry = CollectorRegistry()
    name = f"observed-{group_id}"
    observer = observe(spark, group_id, server.address, query_name=name, registry=registry)
    checker = Checker(client, group_id, name, base / "observed" / "checkpoint")
    listener = add_listener(spark, checker.on_progress)
    try:
        run_to_parquet(
            spark, kafka.bootstrap, topic, base / "observed" / "out", checker.checkpoint, name,
            maxOffsetsPerTrigger=PER_TRIGGER,
        )  # fmt: skip
        # Spark calls listeners after the batch, from its bus: wait for the last batch's turn.
        committed = batches(checker.checkpoint, "commits")
        wait_for(lambda: len(checker.seen) == len(committed) or checker.errors, what="every batch checked")
    finally:
        spark.streams.removeListener(listener)
        observer.stop()
    assert not checker.errors, checker.errors

    run_to_parquet(
        spark, kafka.bootstrap, topic, base / "unobserved" / "out", base / "unobserved" / "checkpoint",
        f"unobserved-{group_id}", maxOffsetsPerTrigger=PER_TRIGGER,
    )  # fmt: skip
    seconds = time.monotonic() - started
    return Runs(topic, group_id, base / "observed", base / "unobserved", checker.seen, observer, registry, seconds)


def test_after_every_batch_the_store_holds_the_checkpoints_offsets_of_that_committed_batch(runs, client):
    expected_batches = END * PARTITIONS // PER_TRIGGER
    checkpoint = runs.observed / "checkpoint"
    assert [s.batch for s in runs.seen] == list(range(expected_batches)) == batches(checkpoint, "commits")
    for seen in runs.seen:
        assert seen.batch in seen.committed  # Spark tells listeners after commits/N is written
        assert seen.store == seen.checkpoint, f"batch {seen.batch}"
        assert len(seen.store) == PARTITIONS
    # Positions moved every batch, up to the end of the topic.
    assert runs.seen[-1].store == {TopicPartition(runs.topic, p): END for p in range(PARTITIONS)}
    assert runs.observer.batches == expected_batches and runs.observer.failures == 0
    # One OBSERVED history entry per partition and batch, in batch order, named after the query.
    history = sorted(all_history(client, runs.group_id), key=lambda c: (c.change_time, c.partition))
    assert {(c.kind, c.source.startswith("spark:")) for c in history} == {(ChangeKind.OBSERVED, True)}
    for p in range(PARTITIONS):
        moves = [c.new_offset for c in history if c.partition == p]
        assert moves == [s.checkpoint[TopicPartition(runs.topic, p)] for s in runs.seen]
    value = runs.registry.get_sample_value("offsetstore_spark_observer_batches_total", {"group": runs.group_id})
    assert value == expected_batches
    print(f"\nthe observed and the unobserved query: {runs.seconds:.1f} s")
    print(f"per batch, store == offsets/N: {[(s.batch, sorted(s.store.values())) for s in runs.seen]}")


def test_lag_is_the_log_end_minus_the_observed_position(runs):
    for seen in runs.seen:
        # Every record was in Kafka before the query started: the log end is END at every batch.
        assert seen.lag == {tp: (END, END - offset) for tp, offset in seen.store.items()}, f"batch {seen.batch}"


def test_the_observed_query_wrote_what_the_unobserved_one_did(runs, spark):
    observed, unobserved = runs.observed / "checkpoint", runs.unobserved / "checkpoint"
    # Nothing of the observer's in the checkpoint: the same files, the same offsets per batch.
    assert files(observed) == files(unobserved)
    assert batches(observed, "offsets") == batches(unobserved, "offsets")
    for n in batches(observed, "offsets"):
        assert checkpoint_offsets(observed, n) == checkpoint_offsets(unobserved, n), f"offsets/{n}"
    rows = parquet_rows(spark, runs.observed / "out")
    assert rows == parquet_rows(spark, runs.unobserved / "out")
    assert len(rows) == len(set(rows)) == END * PARTITIONS


def test_the_observer_writes_nothing_to_kafka(runs, kafka):
    from confluent_kafka.admin import AdminClient

    # No group of the observer's name, and no group (Spark's own included) committed anything on the topic.
    groups = {g.group_id for g in AdminClient(kafka.client_config()).list_consumer_groups().result().valid}
    assert runs.group_id not in groups
    assert kafka_groups_on(kafka, runs.topic) == {}


def test_a_store_that_cannot_be_reached_never_fails_the_query_and_is_said_once(
    kafka, spark, caplog, tmp_path, group_id, topic
):
    make_topic(kafka, topic, PARTITIONS)
    produce(kafka, topic, PARTITIONS, 0, 100)
    with socket.socket() as s:  # an address nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    registry = CollectorRegistry()
    name = f"down-{group_id}"
    observer = observe(spark, group_id, dead, query_name=name, timeout=1, registry=registry)
    try:
        with caplog.at_level(logging.INFO, logger="offsetstore.spark_integration.observer"):
            # 50 records of each partition per batch: two batches.
            run_to_parquet(
                spark, kafka.bootstrap, topic, tmp_path / "out", tmp_path / "checkpoint", name, maxOffsetsPerTrigger=150
            )
            assert batches(tmp_path / "checkpoint", "commits") == [0, 1]
            wait_for(lambda: observer.failures == 2, what="both batches failed to record", timeout=60)
    finally:
        observer.stop()
    assert len(parquet_rows(spark, tmp_path / "out")) == 100 * PARTITIONS
    assert observer.batches == 0
    assert registry.get_sample_value("offsetstore_spark_observer_failures_total", {"group": group_id}) == 2
    said = [r for r in caplog.records if r.name == "offsetstore.spark_integration.observer"]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, [r.getMessage() for r in said]
    assert group_id in said[0].getMessage()


def test_a_restart_from_an_observed_past_instant_reads_every_record_after_it_once(runs, spark, kafka, client, tmp_path):
    # The instant right after batch 0 was recorded (the checking listener's turn, before batch 1's).
    instant = runs.seen[0]
    produce(kafka, runs.topic, PARTITIONS, END, END + 50)  # and records that came after the query stopped
    starting = starting_offsets_at(client, runs.group_id, instant.at)
    start = {TopicPartition(t, int(p)): o for t, parts in json.loads(starting).items() for p, o in parts.items()}
    assert start == instant.checkpoint  # offsets/0: what batch 0 had read
    run_to_parquet(
        spark, kafka.bootstrap, runs.topic, tmp_path / "out", tmp_path / "checkpoint", f"restored-{runs.group_id}",
        startingOffsets=starting,
    )  # fmt: skip
    found = [(t, p, o) for t, p, o, _, _ in parquet_rows(spark, tmp_path / "out")]
    expected = sorted((runs.topic, tp.partition, o) for tp, offset in start.items() for o in range(offset, END + 50))
    assert found == expected  # every record after the instant, none twice, none before
    print(f"\nrestore from {instant.at.isoformat()}: {len(found)} records from {sorted(start.values())}, 0 duplicates")


def test_a_query_stopped_for_longer_than_the_window_reads_stopped(runs, kafka, client, engine):
    # The query has stopped; its log moves on past the last observed positions, and the new log
    # ends are reported (as the watermark reader or any Kafka client would).
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"probe-{runs.group_id}"})
    try:
        ends = {
            p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(runs.topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()
    (end,) = set(ends.values())  # every partition at one end: END, or END + 50 after the restart test
    produce(kafka, runs.topic, PARTITIONS, end, end + 5)
    client.report_watermarks([Watermark(runs.topic, p, -1, end + 5) for p in range(PARTITIONS)])

    with engine.connect() as conn:
        # The last observation was made before the unobserved run: older than a one-second window.
        short = storage.describe_group(conn, runs.group_id, rules=StatusRules(window=1.0))
        long = storage.describe_group(conn, runs.group_id, rules=StatusRules(window=3600.0))
    assert short.observed
    assert short.status is GroupStatus.STOPPED, short.status_reason
    assert long.status is not GroupStatus.STOPPED, long.status_reason  # the same group, within its window
    print(f"\nstopped: {short.status.name}: {short.status_reason}")
