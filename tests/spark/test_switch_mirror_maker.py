"""Issue 58 for Spark: the guide's job (docs/spark.md) on Spark's own Kafka source, switched mid-stream from A to B's
``A.<topic>`` by a planned cutover on a real MirrorMaker 2; and a run on a group bound to another cluster refused.

On :func:`mirrored_kafka` (two KRaft clusters, MirrorMaker 2; the topic written on A by a transactional producer with
aborts, its log start moved on partition 0): A's and B's offsets of a record differ on every partition, so only the
fingerprints the sink stored from its batches' rows place the group on B exactly.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from offsetstore.spark_integration import ExactlyOnceSink, checkpoint_location, starting_offsets
from offsetstore.storage.clusters import bind_cluster, bound_cluster, read_fingerprints
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_mirror_maker import MirroredKafka
from tests.fixtures.fix_spark import run_available_now, wait_for
from tests.fixtures.fix_spark_kafka import kafka_source

# The MirrorMaker fixture is the session's, shared with the Kafka recipe's switch tests (one start per xdist worker, 30-120 s).
pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow, pytest.mark.xdist_group("mirror_maker")]

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


def cluster_id(cluster) -> str:
    from confluent_kafka.admin import AdminClient

    return AdminClient(cluster.client_config()).list_topics(timeout=30).cluster_id


def record_fingerprint(cluster, topic: str, partition: int, offset: int):
    """The fingerprint the Kafka recipe computes of the record at ``offset``, read from the broker."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaPartition

    from offsetstore.kafka_integration.fingerprints import fingerprint

    consumer = Consumer(cluster.client_config(**{"group.id": "unused", "enable.auto.commit": False}))
    try:
        consumer.assign([KafkaPartition(topic, partition, offset)])
        for _ in range(60):
            if found := [m for m in consumer.consume(1, timeout=1.0) if m.error() is None]:
                return fingerprint(found[0])
        raise AssertionError(f"no record at {topic}:{partition}@{offset} within 60 s")
    finally:
        consumer.close()


def guide_query(spark, bootstrap: str, topic: str, database_url: str, group: str, **options: object):
    """The Kafka source of docs/spark.md's job: the store's starting offsets, committed reads, the records' headers."""
    return kafka_source(
        spark,
        bootstrap,
        topic,
        startingOffsets=starting_offsets(database_url, group, {topic: 3}),
        includeHeaders="true",
        **{"kafka.isolation.level": "read_committed"},
        **options,
    )


def guide_sink(database_url: str, group: str, table, bootstrap: str, **options) -> ExactlyOnceSink:
    return ExactlyOnceSink(
        database_url,
        group_id=group,
        table=str(table),
        **options,
        columns=COLUMNS,  # appended (the guide upserts): a record delivered twice shows as two rows
        bootstrap_servers=bootstrap,
        progress=False,
    )


def test_spark_job_switched_mid_stream_to_mirror_makers_copy_exactly_once(
    mirrored_kafka: MirroredKafka,
    kafka_connector_jars,
    spark,
    database_url,
    engine,
    group_id,
    make_table,
    groups,
    tmp_path,
) -> None:
    a, b = mirrored_kafka.source, mirrored_kafka.target
    topic = mirrored_kafka.new_topic(f"orders-{uuid.uuid4().hex[:8]}", transactions=40, seed=58)
    total = sum(len(rs) for rs in mirrored_kafka.source_records(topic).values())
    table = make_table()
    base = tmp_path / "checkpoints"

    # On A: the job runs, small batches, until about a third of the records are in; then the planned cutover fences it.
    # Its batches go the executors' way (their fingerprints by a max_by job), those on B the driver's (from its rows).
    df = guide_query(spark, a.bootstrap, topic.name, database_url, group_id, maxOffsetsPerTrigger=20)
    query = (
        df.writeStream.foreachBatch(guide_sink(database_url, group_id, table, a.bootstrap, write_path="executors"))
        .option("checkpointLocation", checkpoint_location(database_url, group_id, str(base)))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_for(lambda: len(table.rows()) >= total // 3, what="a third of the records on A", query=query)
        fenced = groups("reset", group_id, "--all-topics", "--to-current", "--execute")
        assert fenced.code == 0, fenced.err
        # The next batch is refused (StaleGenerationError), or the idle watch stops the query.
        wait_for(lambda: not query.isActive, what="the job on A fenced", timeout=120)
    finally:
        if query.isActive:
            query.stop()
    at_a, on_a = stored_offsets(engine, group_id), len(table.rows())
    assert on_a < total, "the job on A read everything before it was stopped: not mid-stream"
    with engine.connect() as conn:
        assert bound_cluster(conn, group_id) == cluster_id(a)
        # The fingerprint of each committed offset's record, stored with it.
        assert {(tp.topic, tp.partition): fp.offset for tp, fp in read_fingerprints(conn, group_id).items()} == at_a

    # Replication caught up (A's producer is idle), then the switch: dry run, then --execute.
    mirrored_kafka.wait_mirrored(topic)
    argv = ["switch", group_id, "--to-bootstrap-server", b.bootstrap, "--from-bootstrap-server", a.bootstrap,
            "--replication-policy", "default", "--source-alias", "A", "--output", "json"]  # fmt: skip
    plan = groups(*argv)
    assert plan.code == 0, plan.err
    assert [
        (r["target_topic"], r["method"], r["rereads_at_most"], r["missing"]) for r in plan.json()["partitions"]
    ] == [(topic.remote, "exact", 0, 0)] * topic.partitions
    done = groups(*argv, "--execute")
    assert done.code == 0, done.err

    # A's producer goes on; the job resumes on B's copy, from the store's offsets, on a fresh checkpoint.
    topic.writer.write(10)
    mirrored_kafka.wait_mirrored(topic)
    run_available_now(
        guide_query(spark, b.bootstrap, topic.remote, database_url, group_id, maxOffsetsPerTrigger=200),
        guide_sink(database_url, group_id, table, b.bootstrap),
        checkpoint_location(database_url, group_id, str(base)),
    )

    expected = {r.id for rs in mirrored_kafka.source_records(topic).values() for r in rs}
    seen = Counter(bytes(v).decode() for (v,) in table.rows("value"))
    rereads = sum(n - 1 for n in seen.values())
    lost = len(expected - set(seen))
    print(f"{len(expected)} records ({on_a} on A, stopped at {at_a}): {rereads} re-reads, {lost} lost")
    assert (rereads, lost, set(seen) - expected) == (0, 0, set())
    with engine.connect() as conn:
        assert bound_cluster(conn, group_id) == cluster_id(b)
        on_b = {tp: fp for tp, fp in read_fingerprints(conn, group_id).items() if tp.topic == topic.remote}
    assert {tp.partition: fp.offset for tp, fp in on_b.items()} == {
        p: o for (t, p), o in stored_offsets(engine, group_id).items() if t == topic.remote
    }
    assert on_b == {tp: record_fingerprint(b, tp.topic, tp.partition, fp.offset - 1) for tp, fp in on_b.items()}


def test_a_spark_run_on_a_group_bound_to_another_cluster_is_refused_and_writes_nothing(
    mirrored_kafka: MirroredKafka, kafka_connector_jars, spark, database_url, engine, group_id, make_table, tmp_path
) -> None:
    a = mirrored_kafka.source
    topic = mirrored_kafka.topics["orders"]
    with engine.begin() as conn:
        bind_cluster(conn, group_id, "another-cluster")
    table = make_table()
    with pytest.raises(Exception, match="ClusterMismatchError") as refused:
        run_available_now(
            guide_query(spark, a.bootstrap, topic.name, database_url, group_id),
            guide_sink(database_url, group_id, table, a.bootstrap),
            tmp_path / "checkpoint",
        )
    assert "'another-cluster'" in str(refused.value) and repr(cluster_id(a)) in str(refused.value)
    assert (table.rows(), stored_offsets(engine, group_id)) == ([], {})
    with engine.connect() as conn:
        assert bound_cluster(conn, group_id) == "another-cluster"
        assert read_fingerprints(conn, group_id) == {}
