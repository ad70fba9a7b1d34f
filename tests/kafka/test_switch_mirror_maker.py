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
from offsetstore.storage.clusters import bind_cluster
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


def test_all_groups_of_a_cluster_switched_in_one_command_each_fenced_on_its_own(
    mirrored_kafka: MirroredKafka, database_url, engine, make_table, groups, store
) -> None:
    """``groups switch --all-groups --from-cluster-id A --prefix P``: a dry run that changes nothing, then each group
    in its own fenced reset. A group no method places is refused in its row and the others are switched all the same
    (exit 1); the same command again finds only that group. The server's mirror, configured for B, then shows the
    switched offsets in B's coordinator."""
    from prometheus_client import CollectorRegistry

    from offsetstore.server.kafka_mirror import KafkaMirror

    a, b = mirrored_kafka.source, mirrored_kafka.target
    topic = mirrored_kafka.topics["orders"]
    prefix = f"all-{uuid.uuid4().hex[:8]}-"
    # Sorted by id: the refused group comes between the two others (a failure midway).
    good, bad = [f"{prefix}a", f"{prefix}c"], f"{prefix}b"
    table = make_table()
    rng = random.Random(58)
    for group, most in zip(good, (40, 150), strict=True):
        on_a = recipe_consumer(a)
        with ExactlyOnceWriter(database_url, group, table.name, columns=COLUMNS, consumer=on_a) as writer:
            run_recipe(writer, on_a, topic.name, topic.partitions, {}, rng, most=most)
        on_a.close()
    a_id = groups("describe", good[0], "--output", "json").json()["kafka_cluster_id"]
    with engine.begin() as conn:  # bound to A, on a topic MirrorMaker never copied: no method places it on B
        storage.commit_offsets(conn, bad, [OffsetCommit(f"unmirrored-{uuid.uuid4().hex[:8]}", 0, 5)])
        bind_cluster(conn, bad, a_id)
    at_a = {g: {p: o for (_, p), o in stored_offsets(engine, g).items()} for g in good}
    # The mirror a server configured for B would run (the test drives its rounds): what it has seen so far is drained.
    mirror = KafkaMirror(store, b.bootstrap, [prefix], 0.2, registry=CollectorRegistry(), request_seconds=5)
    mirror.start_client()
    try:
        _switch_all_of_a(mirrored_kafka, mirror, engine, groups, prefix, a_id, good, bad, at_a)
    finally:
        mirror.stop()


def _switch_all_of_a(mirrored_kafka, mirror, engine, groups, prefix, a_id, good, bad, at_a) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaPartition
    from confluent_kafka.admin import AdminClient

    a, b = mirrored_kafka.source, mirrored_kafka.target
    topic = mirrored_kafka.topics["orders"]
    while mirror.round():
        pass
    # Bound to A, the groups are not written to B (their A offsets name other records there): skipped, not refused.
    metric = mirror.registry.get_sample_value
    assert metric("offsetstore_kafka_mirror_skipped_groups_total") >= 3
    assert (metric("offsetstore_kafka_mirror_failures_total") or 0) == 0
    argv = ["switch", "--all-groups", "--from-cluster-id", a_id, "--prefix", prefix, "--to-bootstrap-server",
            b.bootstrap, "--from-bootstrap-server", a.bootstrap, "--replication-policy", "default", "--source-alias",
            "A", "--output", "json"]  # fmt: skip
    dry = groups(*argv)
    assert dry.code == 1, dry.err  # one group refused
    rows = {r["group_id"]: r for r in dry.json()["groups"]}
    assert {g: r["status"] for g, r in rows.items()} == {
        good[0]: "would switch",
        bad: "refused",
        good[1]: "would switch",
    }
    assert "no method placed" in rows[bad]["reason"]
    for g in good:
        assert [(p["method"], p["rereads_at_most"], p["missing"]) for p in rows[g]["partitions"]] == [
            ("exact", 0, 0)
        ] * topic.partitions
    assert {(g, p): o for g in good for (_, p), o in stored_offsets(engine, g).items()} == {
        (g, p): o for g in good for p, o in at_a[g].items()
    }  # the dry run changed nothing

    done = groups(*argv, "--execute")
    assert done.code == 1, done.err
    switched = {r["group_id"]: r for r in done.json()["groups"]}
    assert {g: r["status"] for g, r in switched.items()} == {good[0]: "switched", bad: "refused", good[1]: "switched"}
    copy, source = mirrored_kafka.target_records(topic), mirrored_kafka.source_records(topic)
    for g in good:
        on_b = {p["partition"]: p["target_offset"] for p in switched[g]["partitions"]}
        assert {p: o for (t, p), o in stored_offsets(engine, g).items() if t == topic.remote} == on_b
        resumed = resume_counts(copy, seen_before(source, at_a[g]), on_b)
        print(format_resumes(f"{g} switched with --all-groups:", resumed))
        assert all((r.rereads, r.skipped) == (0, 0) for r in resumed.values()), resumed
        assert groups("describe", g, "--output", "json").json()["kafka_cluster_id"] == done.json()["to_cluster_id"]
    assert groups("describe", bad, "--output", "json").json()["kafka_cluster_id"] == a_id

    again = groups(*argv, "--execute")  # what is left: the refused group only
    assert (again.code, [r["group_id"] for r in again.json()["groups"]]) == (1, [bad])

    # The mirror reads the SWITCH rows like any change: B's coordinator holds the translated offsets.
    while mirror.round():
        pass
    admin = AdminClient(b.client_config())
    for g in good:
        request = ConsumerGroupTopicPartitions(g, [KafkaPartition(topic.remote, p) for p in range(topic.partitions)])
        (future,) = admin.list_consumer_group_offsets([request], request_timeout=10).values()
        in_b = {tp.partition: tp.offset for tp in future.result(timeout=15).topic_partitions}
        assert in_b == {p["partition"]: p["target_offset"] for p in switched[g]["partitions"]}
    assert (metric("offsetstore_kafka_mirror_failures_total") or 0) == 0
