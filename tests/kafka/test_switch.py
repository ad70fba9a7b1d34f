"""Issue 58's planned cutover on two Apache Kafka clusters: the Kafka recipe consumes on A, `groups switch` moves it
mid-stream, it continues on B, and every record lands in the sink exactly once.

A stand-in for MirrorMaker 2 until its fixture lands (lane mm2): the test copies A's committed records to B
itself (key, value, headers and timestamp kept, as MirrorMaker does), while A's records come from a
transactional producer with aborted transactions, so A's offsets and B's differ (aborted records and
transaction markers are not copied) and only the record's fingerprint tells where the group is on B.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from offsetstore.client import ClusterMismatchError, StaleGenerationError
from offsetstore.kafka_integration import ExactlyOnceWriter
from offsetstore.kafka_integration.local_kafka import KafkaCluster, KafkaUnavailable
from tests.fixtures.fix_db import stored_offsets

pytestmark = pytest.mark.kafka

PARTITIONS = 3
COLUMNS = ("topic", "partition", "offset", "value", "run")


@pytest.fixture(scope="module")
def cluster_b() -> Iterator[KafkaCluster]:
    """A second one-broker cluster: the switch's destination (the session's broker is A)."""
    cluster = KafkaCluster(1, heap="256m")
    try:
        cluster.start()
    except KafkaUnavailable as e:  # as the session's broker does (tests/fixtures/fix_apache_kafka.py)
        pytest.skip(f"no Apache Kafka here: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


def produce_with_aborts(cluster: KafkaCluster, topic: str, rng: random.Random, first: int, count: int) -> list[str]:
    """``count`` committed records per partition (values ``p<p>-v<i>``), transactions aborted in between; their values."""
    from confluent_kafka import Producer

    producer = Producer(cluster.producer_config(**{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}))
    producer.init_transactions(30)
    committed = []
    i = first
    while i < first + count:
        n = min(rng.randint(1, 9), first + count - i)
        abort = rng.random() < 0.3
        producer.begin_transaction()
        for k in range(i, i + n):
            for p in range(PARTITIONS):
                v = f"p{p}-v{k}" + ("-aborted" if abort else "")
                producer.produce(topic, key=f"k{k}".encode(), value=v.encode(), partition=p, headers=[("h", b"1")])
        if abort:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += [f"p{p}-v{k}" for k in range(i, i + n) for p in range(PARTITIONS)]
            i += n
    return committed


def replicate(a: KafkaCluster, b: KafkaCluster, topic: str, copied: dict[int, int]) -> None:
    """Copies A's committed records of ``topic`` after ``copied`` (A's next offset per partition) to B, as MirrorMaker does."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KafkaPartition

    reader = Consumer(
        a.client_config(
            **{
                "group.id": "copier",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 20,
            }
        )
    )
    writer = Producer(b.producer_config())
    try:
        for p in range(PARTITIONS):
            end = reader.get_watermark_offsets(KafkaPartition(topic, p), timeout=10)[1]
            reader.assign([KafkaPartition(topic, p, copied.get(p, 0))])
            while copied.get(p, 0) < end:
                m = reader.poll(5)
                assert m is not None, f"no record of {topic}:{p} below its end {end}"
                if m.error() is not None:  # the end: the rest up to it is transaction markers
                    break
                writer.produce(
                    topic, key=m.key(), value=m.value(), headers=m.headers(), partition=p, timestamp=m.timestamp()[1]
                )
                copied[p] = m.offset() + 1
            copied[p] = end
        assert writer.flush(30) == 0
    finally:
        reader.close()


def consume(
    cluster: KafkaCluster,
    writer: ExactlyOnceWriter,
    consumer,
    topic: str,
    offsets: dict,
    rng: random.Random,
    most: int,
    idle_polls: int = 10,
    every_partition: bool = False,
) -> int:
    """Runs the Kafka recipe: batches of random size from the stored offsets until ``most`` records (and some of
    every partition) or the end."""
    from confluent_kafka import TopicPartition as KafkaPartition

    consumer.assign([KafkaPartition(topic, p, offsets.get((topic, p), -2)) for p in range(PARTITIONS)])
    done = 0
    idle = 0
    touched: set[int] = set() if every_partition else set(range(PARTITIONS))
    while (done < most or len(touched) < PARTITIONS) and idle < idle_polls:
        batch = [m for m in consumer.consume(rng.randint(1, 40), timeout=0.5) if m.error() is None]
        if not batch:
            idle += 1
            continue
        idle = 0
        if len(touched) == PARTITIONS:
            batch = batch[: max(1, most - done)]
        touched.update(m.partition() for m in batch)
        writer.write(batch, [{"value": m.value().decode(), "run": 1} for m in batch])
        done += len(batch)
    return done


def recipe_consumer(cluster: KafkaCluster):
    from confluent_kafka import Consumer

    return Consumer(
        cluster.client_config(
            **{
                "group.id": "unused",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_planned_cutover_exactly_once(
    seed, broker, cluster_b, database_url, engine, group_id, make_table, groups
) -> None:
    rng = random.Random(seed)
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, PARTITIONS)
    cluster_b.create_topic(topic, PARTITIONS)
    table = make_table()
    # B's log is not A's: records of another producer ahead of the copy move every offset.
    replicate_from = produce_with_aborts(cluster_b, topic, rng, 10_000, rng.randint(0, 5)) if seed != 1 else []
    expected = produce_with_aborts(broker, topic, rng, 0, 60)
    copied: dict[int, int] = {}

    on_a = recipe_consumer(broker)
    writer_a = ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS, consumer=on_a)
    try:
        consume(broker, writer_a, on_a, topic, {}, rng, most=rng.randint(40, 130), every_partition=True)
        at_a = stored_offsets(engine, group_id)
        replicate(broker, cluster_b, topic, copied)  # planned: replication caught up before the switch

        plan = groups("switch", group_id, "--to-bootstrap-server", cluster_b.bootstrap, "--from-bootstrap-server",
                      broker.bootstrap, "--output", "json")  # fmt: skip
        assert plan.code == 0, plan.err
        rows = plan.json()["partitions"]
        assert plan.json()["dry_run"] is True and stored_offsets(engine, group_id) == at_a
        assert [(r["method"], r["rereads_at_most"], r["missing"]) for r in rows] == [("exact", 0, 0)] * PARTITIONS
        done = groups("switch", group_id, "--to-bootstrap-server", cluster_b.bootstrap, "--from-bootstrap-server",
                      broker.bootstrap, "--execute", "--output", "json")  # fmt: skip
        assert done.code == 0, done.err
        assert done.json()["dry_run"] is False
        # The writer on A was fenced by the switch; a new one on A is refused: the group is on B now.
        with pytest.raises(StaleGenerationError):
            writer_a.write(*_one_more(on_a, topic))
    finally:
        writer_a.close()
    with (
        pytest.raises(ClusterMismatchError) as refused,
        ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS, consumer=on_a) as late,
    ):
        late.join()
    on_a.close()
    assert {refused.value.metadata["bound_cluster_id"], refused.value.metadata["cluster_id"]} == {
        done.json()["to_cluster_id"],
        done.json()["from_cluster_id"],
    }

    # Mid-stream: A goes on producing and replicating; the recipe continues on B from the switched offsets.
    expected += produce_with_aborts(broker, topic, rng, 60, 20)
    replicate(broker, cluster_b, topic, copied)
    on_b = recipe_consumer(cluster_b)
    with ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS, consumer=on_b) as writer_b:
        left = len(expected) - len(table.rows())  # more would be re-reads: the idle end shows them
        consume(cluster_b, writer_b, on_b, topic, stored_offsets(engine, group_id), rng, most=left)
        consume(cluster_b, writer_b, on_b, topic, stored_offsets(engine, group_id), rng, most=10**6, idle_polls=2)
    on_b.close()

    seen = Counter(r.value for r in table.rows())
    rereads = sum(n - 1 for n in seen.values() if n > 1)
    lost = len(set(expected) - set(seen))
    foreign = set(seen) - set(expected) - set(replicate_from)
    print(f"seed {seed}: {len(expected)} records, {rereads} re-reads, {lost} lost, switched at {sorted(at_a.items())}")
    assert (rereads, lost, foreign) == (0, 0, set())
    assert not set(seen) & set(replicate_from)  # B's own earlier records were never the group's


def _one_more(consumer, topic: str):
    batch = []
    while not batch:
        batch = [m for m in consumer.consume(1, timeout=1) if m.error() is None]
    return batch, [{"value": m.value().decode(), "run": 1} for m in batch]
