"""Pipelines through the exactly-once sink on a real SparkSession and PostgreSQL, in both modes and write paths."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry

from offsetstore import storage
from offsetstore.client import Boundary, ChangeKind, OffsetCommit
from offsetstore.server.metrics import GroupCollector
from offsetstore.spark_integration import ExactlyOnceSink, _faults
from offsetstore.spark_integration.testing import FailFirstAttempt, record_key, record_value
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import at_end, kafka_stream, records, run_available_now, staging_rows

pytestmark = pytest.mark.spark

PATHS = ["driver", "executors"]
PARTITIONS = 3
END = 60


@pytest.mark.parametrize("path", PATHS)
def test_append_writes_every_record_once_and_commits_the_next_offsets(
    spark, database_url, engine, client, group_id, topic, make_table, tmp_path, path
):
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id=group_id, table=str(table), write_path=path)
    df = kafka_stream(spark, topic, partitions=PARTITIONS, records=END, maxOffsetsPerTrigger=50)

    run_available_now(df, sink, tmp_path / "checkpoint")

    table.assert_exactly_once(records(topic, PARTITIONS, END))
    for key, value, t, p, o, ts, ts_type in table.rows():
        assert (bytes(key), bytes(value), ts_type) == (record_key(t, p, o), record_value(t, p, o), 0)
        assert ts.year == 2024
    fetched = client.fetch_offsets(group_id)
    assert {tp: c.offset for tp, c in fetched.offsets.items()} == at_end(topic, PARTITIONS, END)
    assert fetched.generation == sink.generation
    if path == "executors":
        assert staging_rows(engine, table, group_id) == 0


@pytest.mark.parametrize("path", PATHS)
def test_upsert_keeps_the_latest_record_of_each_key(
    spark, database_url, engine, group_id, topic, make_table, tmp_path, path
):
    keys = 7
    table = make_table(unique="key")
    sink = ExactlyOnceSink(
        database_url, group_id=group_id, table=str(table), mode="upsert", key_columns=["key"], write_path=path
    )
    # 50 records a batch over 3 partitions of 7 keys: keys repeat within a batch and across batches.
    df = kafka_stream(spark, topic, partitions=PARTITIONS, records=END, maxOffsetsPerTrigger=50, keys=keys)

    run_available_now(df, sink, tmp_path / "checkpoint")

    latest = {}
    for p in range(PARTITIONS):
        for o in range(END):
            latest[record_key(topic, p, o, keys)] = record_value(topic, p, o)
    assert {bytes(k): bytes(v) for k, v in table.rows("key, value")} == latest
    assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, END)


@pytest.mark.parametrize("path", PATHS)
def test_a_replay_with_no_checkpoint_writes_nothing_twice(
    spark, database_url, engine, client, group_id, topic, make_table, tmp_path, path
):
    table = make_table()
    first = kafka_stream(spark, topic, partitions=PARTITIONS, records=30, maxOffsetsPerTrigger=40)
    run_available_now(first, ExactlyOnceSink(database_url, group_id, str(table), write_path=path), tmp_path / "a")

    # The checkpoint is lost and the query starts over from the earliest offsets while
    # the log has grown: what was delivered is skipped, the rest written once.
    again = kafka_stream(spark, topic, partitions=PARTITIONS, records=45, maxOffsetsPerTrigger=40)
    run_available_now(again, ExactlyOnceSink(database_url, group_id, str(table), write_path=path), tmp_path / "b")

    table.assert_exactly_once(records(topic, PARTITIONS, 45))
    assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, 45)
    history = client.list_offset_history(group_id, page_size=1000).items
    assert history and all(c.kind == ChangeKind.COMMIT for c in history)
    assert all(c.new_offset > c.previous_offset for c in history), "a replay moved an offset backwards"


def test_stored_sentinels_skip_nothing(spark, database_url, engine, group_id, topic, make_table, tmp_path):
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, p, 20) for p in range(2)])
        # No watermark is known for the topic, so the reset stores the sentinel -2.
        storage.reset_offsets(conn, group_id, {topic: []}, to_boundary=Boundary.EARLIEST)
    assert stored_offsets(engine, group_id) == at_end(topic, 2, -2)
    table = make_table()

    run_available_now(
        kafka_stream(spark, topic, partitions=2, records=30),
        ExactlyOnceSink(database_url, group_id, str(table), write_path="driver"),
        tmp_path / "checkpoint",
    )

    table.assert_exactly_once(records(topic, 2, 30))
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 30)


@pytest.mark.parametrize("path", PATHS)
def test_columns_narrow_the_write_and_every_name_is_quoted(
    spark, database_url, engine, group_id, topic, tmp_path, path
):
    from pyspark.sql import functions as F

    schema = f"Sink Schema.{uuid.uuid4().hex[:6]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        conn.exec_driver_sql(
            f'CREATE TABLE "{schema}"."Order Lines" ("partition" integer, "offset" bigint, "select" text, '
            '"Value`s" bytea, PRIMARY KEY ("partition", "offset"))'
        )
    try:
        df = (
            kafka_stream(spark, topic, partitions=2, records=25, maxOffsetsPerTrigger=20)
            .withColumn("select", F.col("value").cast("string"))
            .withColumn("Value`s", F.col("value"))
            .withColumn("not written", F.lit(1))
        )
        sink = ExactlyOnceSink(
            database_url,
            group_id,
            (schema, "Order Lines"),
            mode="upsert",
            key_columns=["partition", "offset"],
            columns=["partition", "offset", "select", "Value`s"],
            write_path=path,
        )
        run_available_now(df, sink, tmp_path / "checkpoint")
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                f'SELECT "partition", "offset", "select", "Value`s" FROM "{schema}"."Order Lines"'
            ).all()
        assert sorted((p, o, s, bytes(v)) for p, o, s, v in rows) == sorted(
            (p, o, record_value(topic, p, o).decode(), record_value(topic, p, o)) for p in range(2) for o in range(25)
        )
        assert stored_offsets(engine, group_id) == at_end(topic, 2, 25)
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')


def test_a_retried_staging_task_leaves_no_duplicates(
    spark, database_url, engine, group_id, topic, make_table, tmp_path
):
    markers = tmp_path / "failed-tasks"
    markers.mkdir()
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="executors")
    # Every task's first attempt fails after its staged rows were committed; Spark retries it.
    with _faults.installed(task=FailFirstAttempt("task_staged", str(markers))):
        run_available_now(
            kafka_stream(spark, topic, partitions=PARTITIONS, records=END, maxOffsetsPerTrigger=90),
            sink,
            tmp_path / "checkpoint",
        )

    assert len(list(markers.iterdir())) >= PARTITIONS, "no task failed: the test proved nothing"
    table.assert_exactly_once(records(topic, PARTITIONS, END))
    assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, END)


def test_progress_is_visible_through_the_running_service(
    spark, database_url, store, client, group_id, topic, make_table, tmp_path
):
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="driver")
    seen = []

    def look(stage, batch_id):
        if stage == "committed":
            described = client.describe_group(group_id)
            seen.append((batch_id, [(s.offset, s.log_end_offset, s.lag) for s in described.partitions]))

    # 4 batches of 10 records per partition.
    with _faults.installed(driver=look):
        run_available_now(
            kafka_stream(spark, topic, partitions=2, records=40, maxOffsetsPerTrigger=20), sink, tmp_path / "checkpoint"
        )

    # From the second batch on, the log end comes from the query's progress (the
    # source's latest offset), so DescribeGroup shows how far behind the query is.
    assert seen[1:] == [(1, [(20, 40, 20)] * 2), (2, [(30, 40, 10)] * 2), (3, [(40, 40, 0)] * 2)]

    fetched = client.fetch_offsets(group_id)
    assert {tp: c.offset for tp, c in fetched.offsets.items()} == at_end(topic, 2, 40)
    assert all(c.metadata.startswith("spark batch ") for c in fetched.offsets.values())
    history = client.list_offset_history(group_id, page_size=100).items
    for p in (0, 1):  # oldest first, one commit per batch
        assert [(c.previous_offset, c.new_offset) for c in reversed(history) if c.partition == p] == [
            (-1, 10),
            (10, 20),
            (20, 30),
            (30, 40),
        ]
    assert {(c.kind, c.generation, c.actor) for c in history} == {
        (ChangeKind.COMMIT, sink.generation, f"spark:{sink._run.key[1]}")
    }

    registry = CollectorRegistry()
    registry.register(GroupCollector(store, 100_000))
    for p in range(2):
        labels = {"group": group_id, "topic": topic, "partition": str(p)}
        assert registry.get_sample_value("offsetstore_group_offset", labels) == 40
        assert registry.get_sample_value("offsetstore_group_lag", labels) == 0


def test_auto_writes_batches_that_fit_the_driver_bound_from_the_driver(
    spark, database_url, engine, group_id, topic, make_table, tmp_path
):
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="auto", executor_threshold=100)
    stages = []

    with _faults.installed(driver=lambda stage, batch_id: stages.append((batch_id, stage))):
        run_available_now(
            kafka_stream(spark, topic, partitions=2, records=60, maxOffsetsPerTrigger=40), sink, tmp_path / "checkpoint"
        )

    assert sorted(b for b, stage in stages if stage == "in_transaction") == [0, 1, 2]
    assert [b for b, stage in stages if stage == "staged"] == [], "batches of 40 rows fit a bound of 100"
    table.assert_exactly_once(records(topic, 2, 60))


def test_a_batch_without_the_kafka_columns_is_refused(
    spark, database_url, engine, group_id, topic, make_table, tmp_path
):
    from pyspark.errors import StreamingQueryException

    table = make_table()
    df = kafka_stream(spark, topic, partitions=1, records=5).drop("offset")
    with pytest.raises(StreamingQueryException, match="no offset column"):
        run_available_now(df, ExactlyOnceSink(database_url, group_id, str(table)), tmp_path / "checkpoint")
    assert table.coordinates() == [] and stored_offsets(engine, group_id) == {}
