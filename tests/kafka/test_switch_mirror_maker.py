"""Issue 58's planned cutover on a real MirrorMaker 2: the Kafka recipe consumes on A, `groups switch` moves it to B's
``A.<topic>`` mid-stream, it continues on B; every record in the sink exactly once, beside MirrorMaker's own translation.

On :func:`mirrored_kafka` (two KRaft clusters, MirrorMaker 2 in dedicated mode; each topic written on A by
a transactional producer with aborts, its log start moved on partition 0): A's and B's offsets of a
record differ on every partition, and only the record's fingerprint says where the group is on B.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from offsetstore import storage
from offsetstore.client import ClusterMismatchError, StaleGenerationError
from offsetstore.core.types import OffsetCommit
from offsetstore.kafka_integration import ExactlyOnceWriter
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_mirror_maker import MirroredKafka, mirror_makers_resume, plain_group_on_a
from tests.fixtures.mirror_maker import format_resumes, resume_counts, seen_before, wait_mirrored

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("mirror_maker")]

COLUMNS = ("topic", "partition", "offset", "value", "run")


def recipe_consumer(cluster):
    from confluent_kafka import Consumer

    return Consumer(
        cluster.client_config(
            **{
                "group.id": "unused",  # assigned, never subscribed: positions come from the store
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
    )


def run_recipe(writer, consumer, topic: str, partitions: int, start: dict, rng: random.Random, most: int) -> None:
    """The Kafka recipe: assigned at the stored offsets (else the log start), batches of random size, until ``most``
    records (at least one of each partition) or two idle polls at the end."""
    from confluent_kafka import TopicPartition as KafkaPartition

    consumer.assign([KafkaPartition(topic, p, start.get((topic, p), -2)) for p in range(partitions)])
    done, idle, touched = 0, 0, set()
    while (done < most or len(touched) < partitions) and idle < 2:
        batch = [m for m in consumer.consume(rng.randint(1, 60), timeout=1.0) if m.error() is None]
        if not batch:
            idle += 1
            continue
        idle = 0
        touched.update(m.partition() for m in batch)
        writer.write(batch, [{"value": m.value().decode(), "run": 1} for m in batch])
        done += len(batch)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_planned_cutover_on_mirror_maker_exactly_once(
    seed, mirrored_kafka: MirroredKafka, database_url, engine, group_id, make_table, groups
) -> None:
    rng = random.Random(seed)
    a, b = mirrored_kafka.source, mirrored_kafka.target
    topic = mirrored_kafka.new_topic(f"orders-{uuid.uuid4().hex[:8]}", transactions=30, seed=seed)
    table = make_table()
    total = sum(len(rs) for rs in mirrored_kafka.source_records(topic).values())

    on_a = recipe_consumer(a)
    writer_a = ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS, consumer=on_a)
    run_recipe(writer_a, on_a, topic.name, topic.partitions, {}, rng, most=int(total * rng.uniform(0.3, 0.8)))
    at_a = {p: o for (_, p), o in stored_offsets(engine, group_id).items()}
    # Planned: the producers stop on A and MirrorMaker catches up; the switch then fences the group and moves it.
    wait_mirrored(mirrored_kafka.mirror, topic.name, topic.partitions)
    argv = ["switch", group_id, "--to-bootstrap-server", b.bootstrap, "--from-bootstrap-server", a.bootstrap,
            "--replication-policy", "default", "--source-alias", "A", "--output", "json"]  # fmt: skip
    plan = groups(*argv)
    assert plan.code == 0, plan.err
    moved = plan.json()["partitions"]
    print(f"seed {seed}: plan", [(r["partition"], r["source_offset"], r["target_offset"], r["method"]) for r in moved])
    assert [(r["target_topic"], r["method"], r["rereads_at_most"], r["missing"]) for r in moved] == [
        (topic.remote, "exact", 0, 0)
    ] * topic.partitions
    done = groups(*argv, "--execute")
    assert done.code == 0, done.err
    try:  # the recipe still running on A is fenced by the switch: its next write writes nothing
        with pytest.raises(StaleGenerationError):
            writer_a.write(*_next_batch(on_a))
    finally:
        writer_a.close()
        on_a.close()
    late = recipe_consumer(a)
    try:
        with ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS, consumer=late) as w:
            with pytest.raises(ClusterMismatchError):  # the group is B's now: a consumer of A is refused at its start
                w.join()
    finally:
        late.close()

    # Mid-stream: A's producer goes on (MirrorMaker copies it), the recipe continues on B's A.<topic>.
    topic.writer.write(10)
    wait_mirrored(mirrored_kafka.mirror, topic.name, topic.partitions)
    on_b = recipe_consumer(b)
    start = stored_offsets(engine, group_id)
    with ExactlyOnceWriter(database_url, group_id, table.name, columns=COLUMNS, consumer=on_b) as writer:
        run_recipe(writer, on_b, topic.remote, topic.partitions, start, rng, most=10**9)
    on_b.close()

    expected = {r.id for rs in mirrored_kafka.source_records(topic).values() for r in rs}
    seen = Counter(r.value for r in table.rows())
    rereads = sum(n - 1 for n in seen.values() if n > 1)
    lost = len(expected - set(seen))
    # MirrorMaker 2's own translation of a plain group standing where ours stood on A, resumed on B: beside ours.
    on_a_plain = plain_group_on_a(mirrored_kafka, topic, f"plain-{uuid.uuid4().hex[:8]}", offsets=at_a)
    theirs = mirror_makers_resume(mirrored_kafka, topic, on_a_plain)
    print(format_resumes(f"seed {seed}: MirrorMaker 2's translation of the same positions:", theirs))
    print(f"seed {seed}: {len(expected)} records, offsetstore: {rereads} re-reads, {lost} lost (A at {at_a})")
    assert (rereads, lost, set(seen) - expected) == (0, 0, set())
    assert all(r.skipped == 0 for r in theirs.values())


def _next_batch(consumer):
    """The next records the consumer on A holds (A's producer wrote on past the group), as the recipe writes them."""
    batch = []
    while not batch:
        batch = [m for m in consumer.consume(10, timeout=1.0) if m.error() is None]
    return batch, [{"value": m.value().decode(), "run": 1} for m in batch]


def test_a_group_without_fingerprints_falls_back_to_mirror_makers_offset_syncs(
    mirrored_kafka: MirroredKafka, engine, group_id, groups
) -> None:
    """A group committed over gRPC (no fingerprint, no cluster) moves by MirrorMaker's offset syncs: it may re-read, within
    the bound the plan gives, and never skips."""
    topic = mirrored_kafka.topics["orders"]
    source = mirrored_kafka.source_records(topic)
    at_a = {p: rs[len(rs) * 2 // 3].offset for p, rs in source.items()}  # the next record to read, on A
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic.name, p, o) for p, o in at_a.items()])
    argv = ["switch", group_id, "--to-bootstrap-server", mirrored_kafka.target.bootstrap, "--from-bootstrap-server",
            mirrored_kafka.source.bootstrap, "--replication-policy", "default", "--source-alias", "A", "--output", "json"]  # fmt: skip
    done = groups(*argv, "--execute")
    assert done.code == 0, done.err
    moved = {r["partition"]: r for r in done.json()["partitions"]}
    assert {r["method"] for r in moved.values()} == {"offset-syncs"}, moved
    assert done.json()["from_cluster_id"] == ""  # a group bound to none moves too, and is bound now
    resumed = resume_counts(
        mirrored_kafka.target_records(topic),
        seen_before(source, at_a),
        {p: r["target_offset"] for p, r in moved.items()},
    )
    print(format_resumes("offsetstore's switch by offset syncs (no fingerprint):", resumed))
    assert all(resumed[p].skipped == 0 and resumed[p].rereads <= moved[p]["rereads_at_most"] for p in moved), resumed
    assert all(r["missing"] == 0 for r in moved.values())
