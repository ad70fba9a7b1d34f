"""The sink as an operator meets it (issue 9): durable sessions, honest watermarks, visible replays, a bounded driver."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from sqlalchemy.pool import NullPool

from offsetstore import storage
from offsetstore.client import EARLIEST, Boundary, OffsetCommit
from offsetstore.runtime import migrate
from offsetstore.spark_integration import ExactlyOnceSink, starting_offsets
from offsetstore.spark_integration.testing import write_log_end
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import KAFKA_TABLE, at_end, kafka_stream, records, run_available_now, wait_for

pytestmark = pytest.mark.spark

SINK_LOGGER = "offsetstore.spark_integration"

# Records, in a table of the test's, the settings of every session that inserts into a
# table carrying the trigger: the sink's COPY or move, and the staging tasks' COPY.
SETTINGS_PROBE = """
CREATE TABLE public.sessions_seen (app text, sync text, timeout text, tbl text);
CREATE FUNCTION public.note_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.sessions_seen VALUES (current_setting('application_name'),
        current_setting('synchronous_commit'), current_setting('statement_timeout'), TG_TABLE_NAME);
    RETURN NULL;
END $$;
-- The staging table is created by the sink, so its trigger is added as it is created.
CREATE FUNCTION public.watch_new_tables() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE created record;
BEGIN
    FOR created IN SELECT object_identity FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE TABLE AS'
    LOOP
        EXECUTE 'CREATE TRIGGER note AFTER INSERT ON ' || created.object_identity
            || ' FOR EACH STATEMENT EXECUTE FUNCTION public.note_session()';
    END LOOP;
END $$;
CREATE EVENT TRIGGER watch_new_tables ON ddl_command_end WHEN TAG IN ('CREATE TABLE AS')
    EXECUTE FUNCTION public.watch_new_tables();
"""


def test_sink_and_staging_sessions_commit_synchronously_where_the_database_does_not(
    spark, scratch_database_url, topic, tmp_path
):
    url = scratch_database_url
    migrate.upgrade(url)
    engine = sa.create_engine(url, poolclass=NullPool)
    database = sa.make_url(url).database
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET synchronous_commit = off')
            conn.exec_driver_sql(KAFKA_TABLE.format(table="public.sink", extra=""))
            conn.exec_driver_sql(SETTINGS_PROBE)
            conn.exec_driver_sql(
                "CREATE TRIGGER note AFTER INSERT ON public.sink FOR EACH STATEMENT EXECUTE FUNCTION public.note_session()"
            )
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off", "the database default applies"

        for path in ("driver", "executors"):
            sink = ExactlyOnceSink(url, f"g-{path}", "public.sink", write_path=path, statement_timeout_ms=123_000)
            run_available_now(kafka_stream(spark, topic, partitions=2, records=10), sink, tmp_path / path)

        with engine.connect() as conn:
            seen = set(
                conn.exec_driver_sql(
                    "SELECT app, sync, timeout, strpos(tbl, '_offsetstore_stage_') > 0 FROM sessions_seen"
                )
            )
            written = conn.exec_driver_sql("SELECT count(*) FROM public.sink").scalar()
    finally:
        engine.dispose()
    assert written == 2 * 20
    assert seen == {
        ("offsetstore-spark-sink", "on", "123s", False),  # driver COPY, and the executors' path's move
        ("offsetstore-spark-stage", "on", "123s", True),  # the staging tasks' COPY
    }


def test_the_sink_never_reports_a_log_start_so_a_reset_to_earliest_is_not_its_first_offset(
    spark, database_url, engine, client, group_id, topic, make_table, tmp_path
):
    table = make_table()
    # The group was at 5000 when this query started: its first batch reads from 5000.
    client.commit_offsets(group_id, [OffsetCommit(topic, p, 5000) for p in range(2)])
    start = starting_offsets(database_url, group_id, {topic: 2})
    df = kafka_stream(spark, topic, partitions=2, records=5010, startingOffsets=start)
    run_available_now(df, ExactlyOnceSink(database_url, group_id, str(table)), tmp_path / "checkpoint")
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 5010)

    with engine.begin() as conn:
        result = storage.reset_offsets(conn, group_id, {topic: [0, 1]}, to_boundary=Boundary.EARLIEST)

    # The log starts at 0, which no batch ever saw: the store must not think it is 5000.
    assert {(c.topic, c.partition): c.new_offset for c in result.changes} == at_end(topic, 2, EARLIEST)
    assert stored_offsets(engine, group_id) == at_end(topic, 2, EARLIEST)
    # The log ends the batches saw are reported, for lag.
    assert {(p.topic, p.partition): p.log_end_offset for p in client.describe_group(group_id).partitions} == at_end(
        topic, 2, 5010
    )


def batch_lines(caplog: pytest.LogCaptureFixture, group_id: str) -> list[logging.LogRecord]:
    """The sink's per-batch INFO lines of one group."""
    return [
        r
        for r in caplog.records
        if r.name == SINK_LOGGER
        and r.levelno == logging.INFO
        and getattr(r, "group_id", None) == group_id
        and hasattr(r, "batch_id")
    ]


@pytest.mark.parametrize("path", ["driver", "executors"])
def test_a_restart_without_checkpoint_is_logged_and_counted_as_skipped_rows(
    spark, database_url, group_id, topic, make_table, tmp_path, caplog, path
):
    caplog.set_level(logging.INFO, logger=SINK_LOGGER)
    registry = CollectorRegistry()
    table = make_table()

    def run(records_per_partition: int, checkpoint: str) -> list[logging.LogRecord]:
        caplog.clear()
        sink = ExactlyOnceSink(database_url, group_id, str(table), write_path=path, registry=registry)
        df = kafka_stream(spark, topic, partitions=3, records=records_per_partition, maxOffsetsPerTrigger=40)
        run_available_now(df, sink, tmp_path / checkpoint)
        return batch_lines(caplog, group_id)

    first = run(30, "a")
    # The checkpoint is lost: the query reads the topic from the start again, now 45 deep.
    again = run(45, "b")

    def sample(name: str) -> float | None:
        return registry.get_sample_value(name, {"group": group_id})

    assert sum(r.skipped for r in first) == 0 and sum(r.written for r in first) == 90
    assert sum(r.skipped for r in again) == 90, "the replayed rows are reported as skipped"
    assert sum(r.written for r in again) == 45
    assert all(r.rows == r.written + r.skipped and r.path == path for r in first + again)
    assert all(f"{r.rows} rows, {r.written} written, {r.skipped} skipped" in r.getMessage() for r in again)
    assert sample("offsetstore_sink_rows_skipped_total") == 90
    assert sample("offsetstore_sink_rows_written_total") == 135
    assert sample("offsetstore_sink_batches_total") == len(first) + len(again)
    table.assert_exactly_once(records(topic, 3, 45))


def test_auto_decides_from_each_batch_so_a_spike_after_small_batches_skips_the_driver(
    spark, database_url, engine, group_id, topic, make_table, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger=SINK_LOGGER)
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="auto", executor_threshold=100)
    ends = tmp_path / "ends.json"
    write_log_end(ends, {topic: {"0": 10, "1": 10}})
    df = kafka_stream(spark, topic, partitions=2, endOffsetsFile=str(ends))
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        for end in (10, 20, 520):  # two small batches, then a spike of 1000 rows
            write_log_end(ends, {topic: {"0": end, "1": end}})
            wait_for(lambda end=end: stored_offsets(engine, group_id) == at_end(topic, 2, end), query=query)
    finally:
        query.stop()

    lines = batch_lines(caplog, group_id)
    assert [(r.rows, r.path, r.driver_max_rows) for r in lines] == [
        (20, "driver", 100),
        (20, "driver", 100),
        (1000, "executors", 100),
    ]
    assert "1000 rows" in lines[-1].getMessage() and "executors path" in lines[-1].getMessage()
    table.assert_exactly_once(records(topic, 2, 520))
