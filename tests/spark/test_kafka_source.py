"""What Spark's own Kafka source brings to the sink on Apache Kafka: the stand-in's equal, new partitions, a
recreated topic, retention below the stored offset, read limits and read_committed transactions."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from offsetstore.core.types import GroupStatus
from offsetstore.server.kafka_watermarks import KafkaWatermarks
from offsetstore.spark_integration import ExactlyOnceSink, starting_offsets
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import at_end, kafka_stream, records, run_available_now, wait_for
from tests.fixtures.fix_spark_kafka import kafka_source, make_topic, produce

# The first test here may start the session's Spark, its broker and Ivy's resolution (minutes on a loaded machine).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

COLUMNS = 'key, value, topic, "partition", "offset", "timestamp", "timestampType"'


@pytest.fixture
def kafka(kafka_connector_jars, kafka_broker, spark):
    """The session's broker, once the session's Spark has the connector."""
    return kafka_broker


def test_the_stand_in_and_kafkas_own_source_hand_the_sink_the_same_rows_and_offsets(
    kafka, spark, database_url, engine, make_table, topic, group_id, tmp_path
):
    make_topic(kafka, topic, 3)
    produce(kafka, topic, 3, 0, 500)
    real, shaped = make_table(), make_table()
    # Both started as the guide starts its query: from the store's offsets (none yet: earliest).
    start = starting_offsets(database_url, group_id, {topic: 3})
    sources = [
        (real, kafka_source(spark, kafka.bootstrap, topic, startingOffsets=start, maxOffsetsPerTrigger=400)),
        (
            shaped,
            kafka_stream(spark, topic, partitions=3, records=500, startingOffsets=start, maxOffsetsPerTrigger=400),
        ),
    ]
    for n, (table, df) in enumerate(sources):
        run_available_now(df, ExactlyOnceSink(database_url, f"{group_id}-{n}", str(table)), tmp_path / str(n))
    assert sorted(real.rows(COLUMNS)) == sorted(shaped.rows(COLUMNS))
    real.assert_exactly_once(records(topic, 3, 500))
    assert stored_offsets(engine, f"{group_id}-0") == stored_offsets(engine, f"{group_id}-1") == at_end(topic, 3, 500)


def test_a_partition_added_while_the_query_runs_is_read_and_its_stored_offset_starts_the_next_run(
    kafka, spark, database_url, engine, make_table, topic, group_id, tmp_path
):
    make_topic(kafka, topic, 2)
    produce(kafka, topic, 2, 0, 100)
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table))
    df = kafka_source(
        spark, kafka.bootstrap, topic, startingOffsets=starting_offsets(database_url, group_id, {topic: 2})
    )
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "a")).start()
    try:
        wait_for(lambda: stored_offsets(engine, group_id) == at_end(topic, 2, 100), what="2 partitions", query=query)
        kafka.tool(
            "kafka-topics", "--bootstrap-server", kafka.bootstrap, "--alter", "--topic", topic, "--partitions", "3"
        )
        produce(kafka, topic, [2], 0, 100)
        # Spark finds the new partition on its own and reads it from its start.
        wait_for(lambda: stored_offsets(engine, group_id) == at_end(topic, 3, 100), what="partition 2", query=query)
    finally:
        query.stop()

    produce(kafka, topic, 3, 100, 150)
    # A stale partition count is refused by Spark itself, at start.
    stale = starting_offsets(database_url, group_id, {topic: 2})
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        run_available_now(kafka_source(spark, kafka.bootstrap, topic, startingOffsets=stale), sink, tmp_path / "b")
    # The checkpoint lost, the store's offsets of all three partitions start the next run.
    start = starting_offsets(database_url, group_id, {topic: 3})
    assert json.loads(start) == {topic: {"0": 100, "1": 100, "2": 100}}
    run_available_now(kafka_source(spark, kafka.bootstrap, topic, startingOffsets=start), sink, tmp_path / "c")
    table.assert_exactly_once(records(topic, 3, 150))


def test_a_deleted_and_recreated_topic_fails_the_query_until_the_operator_resets_the_group(
    kafka, spark, database_url, engine, make_table, topic, group_id, client, tmp_path
):
    make_topic(kafka, topic, 2)
    produce(kafka, topic, 2, 0, 100)
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table))
    checkpoint = tmp_path / "checkpoint"
    run_available_now(kafka_source(spark, kafka.bootstrap, topic), sink, checkpoint)

    kafka.tool("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--delete", "--topic", topic)
    wait_for(lambda: _recreated(kafka, topic, 2), what="the topic recreated", timeout=60)
    produce(kafka, topic, 2, 0, 40, tag=b"|new")

    # failOnDataLoss (true by default): the offsets went back, Spark stops the query; nothing is written.
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(
            kafka_source(spark, kafka.bootstrap, topic), ExactlyOnceSink(database_url, group_id, str(table)), checkpoint
        )
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 100)

    # The operator's way out: reset the group to the new topic's start and run on a fresh checkpoint.
    client.reset_offsets(group_id, topics=[topic], to_offset=0)
    start = starting_offsets(database_url, group_id, {topic: 2})
    sink = ExactlyOnceSink(database_url, group_id, str(table))
    run_available_now(kafka_source(spark, kafka.bootstrap, topic, startingOffsets=start), sink, tmp_path / "after")
    new = [r for r in table.rows('value, topic, "partition", "offset"') if r[0].endswith(b"|new")]
    assert sorted((t, p, o) for _, t, p, o in new) == sorted(records(topic, 2, 40))
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 40)


def _recreated(kafka, topic: str, partitions: int) -> bool:
    try:
        make_topic(kafka, topic, partitions)
    except Exception:  # still being deleted: TopicExistsException or a marked-for-deletion error
        return False
    return True


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_records_removed_by_retention_below_the_stored_offset_are_lost_and_said_so(
    kafka, spark, database_url, engine, make_table, topic, group_id, store, client, tmp_path, fail_on_data_loss
):
    make_topic(kafka, topic, 2)
    produce(kafka, topic, 2, 0, 100)
    table = make_table()
    checkpoint = tmp_path / "checkpoint"
    run_available_now(
        kafka_source(spark, kafka.bootstrap, topic), ExactlyOnceSink(database_url, group_id, str(table)), checkpoint
    )
    produce(kafka, topic, 2, 100, 200)
    # The operator's delete-records (what retention.ms does in its own time) removes 100..149 before they are read.
    plan = tmp_path / "delete.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": p, "offset": 150} for p in range(2)]})
    )
    kafka.tool("kafka-delete-records", "--bootstrap-server", kafka.bootstrap, "--offset-json-file", str(plan))

    # The server's watermark reader (serve --watermarks-kafka-bootstrap) sees the log start above the stored offset.
    marks = KafkaWatermarks(store, kafka.bootstrap, [group_id], registry=CollectorRegistry(), request_seconds=5)
    marks.start_client()
    marks.round()
    assert [p.status for p in client.describe_group(group_id).partitions] == [GroupStatus.LOST] * 2

    df = kafka_source(spark, kafka.bootstrap, topic, failOnDataLoss=str(fail_on_data_loss).lower())
    sink = ExactlyOnceSink(database_url, group_id, str(table))
    if fail_on_data_loss:
        # Spark stops the query, naming the option; nothing is written, the verdict stays LOST.
        with pytest.raises(Exception, match="failOnDataLoss"):
            run_available_now(df, sink, checkpoint)
        assert stored_offsets(engine, group_id) == at_end(topic, 2, 100)
        table.assert_exactly_once(records(topic, 2, 100))
        return
    # failOnDataLoss=false: Spark skips to the log start; 100..149 are gone, the rest lands once.
    run_available_now(df, sink, checkpoint)
    table.assert_exactly_once(records(topic, 2, 100) | {(topic, p, o) for p in range(2) for o in range(150, 200)})
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 200)
    marks.round()
    assert GroupStatus.LOST not in [p.status for p in client.describe_group(group_id).partitions]


def test_read_committed_never_delivers_an_aborted_record_and_max_offsets_per_trigger_bounds_each_batch(
    kafka, spark, database_url, engine, make_table, topic, group_id, tmp_path
):
    from confluent_kafka import Producer

    make_topic(kafka, topic, 2)
    producer = Producer(kafka.producer_config(**{"transactional.id": group_id}))
    producer.init_transactions(30)
    sent = {}
    for n, (outcome, count) in enumerate([("commit", 300), ("abort", 100), ("commit", 200)]):
        producer.begin_transaction()
        for i in range(count):
            for p in range(2):
                producer.produce(topic, value=f"{outcome}-{n}-{i}".encode(), partition=p)
        producer.flush(30)
        (producer.commit_transaction if outcome == "commit" else producer.abort_transaction)(30)
        sent[n] = outcome
    table = make_table()
    df = kafka_source(
        spark, kafka.bootstrap, topic, **{"kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": 150}
    )
    query = run_available_now(df, ExactlyOnceSink(database_url, group_id, str(table)), tmp_path / "checkpoint")

    values = [r[0] for r in table.rows("value")]
    assert len(values) == 2 * 500 and not [v for v in values if v.startswith(b"abort")]
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 150 and sum(sizes) == 1000, sizes
    # Per partition: 300 records, a marker, 100 aborted, a marker, 200 records, a marker (603 offsets).
    # The sink stores the last record's offset + 1; the commit marker after it stays unread.
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 602)
