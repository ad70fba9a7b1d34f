"""Fencing of Spark queries: a newer run of the group, or an operator's reset, stops the running query."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from offsetstore import storage
from offsetstore.client import ChangeKind
from offsetstore.spark_integration import ExactlyOnceSink, _faults, checkpoint_location, starting_offsets
from offsetstore.spark_integration.testing import write_log_end
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import at_end, kafka_stream, records, run_available_now, wait_for

pytestmark = pytest.mark.spark

TRIGGER = "300 milliseconds"


def _ends(topic: str, partitions: int, end: int) -> dict:
    return {topic: {str(p): end for p in range(partitions)}}


def _stale(query) -> bool:
    """Whether ``query`` stopped, within 3 minutes, with the sink's StaleGenerationError."""
    try:
        query.awaitTermination(180)
    except StreamingQueryException as error:
        return "offsetstore.core.errors.StaleGenerationError" in str(error)
    raise AssertionError("the fenced query is still running" if query.isActive else "the query stopped without error")


def test_a_newer_run_of_the_group_fences_the_older(spark, database_url, engine, group_id, topic, make_table, tmp_path):
    table = make_table()
    log_end = tmp_path / "log-end.json"
    write_log_end(log_end, _ends(topic, 2, 20))

    def start(name: str, **options):
        # The batch path of fencing; an idle run's is test_a_reset_stops_an_idle_query_between_batches.
        sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="driver", watch_idle=False)
        df = kafka_stream(spark, topic, partitions=2, endOffsetsFile=str(log_end), **options)
        query = (
            df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(processingTime=TRIGGER)
            .start()
        )
        return sink, query

    old_sink, old = start("old")
    new = None
    try:
        wait_for(
            lambda: stored_offsets(engine, group_id) == at_end(topic, 2, 20), what="the old run's commits", query=old
        )
        # A second run of the same group, say a redeploy on another checkpoint, started from the store.
        new_sink, new = start("new", startingOffsets=starting_offsets(database_url, group_id, {topic: 2}))
        write_log_end(log_end, _ends(topic, 2, 40))
        wait_for(lambda: new_sink.generation is not None, what="the new run to join", query=new)
        assert new_sink.generation > old_sink.generation
        # The old run's next batch is refused, and the query stops with the error.
        write_log_end(log_end, _ends(topic, 2, 60))
        assert _stale(old)
        wait_for(
            lambda: stored_offsets(engine, group_id) == at_end(topic, 2, 60), what="the new run's commits", query=new
        )
    finally:
        for q in (old, new):
            if q is not None and q.isActive:
                q.stop()

    table.assert_exactly_once(records(topic, 2, 60))


def test_an_operator_reset_stops_the_query_and_the_documented_restart_replays_from_it(
    spark, database_url, engine, client, group_id, topic, make_table, tmp_path
):
    table = make_table(extra=", run integer")
    log_end = tmp_path / "log-end.json"
    write_log_end(log_end, _ends(topic, 2, 30))
    base = str(tmp_path / "checkpoints")

    def start(run: int):
        # The documented restart: a checkpoint of the group's current reset generation,
        # and starting offsets from the store.
        checkpoint = checkpoint_location(database_url, group_id, base)
        df = kafka_stream(
            spark,
            topic,
            partitions=2,
            endOffsetsFile=str(log_end),
            startingOffsets=starting_offsets(database_url, group_id, {topic: 2}),
        ).withColumn("run", F.lit(run))
        # The batch path: the first run meets the reset at its next batch, not while idle.
        sink = ExactlyOnceSink(database_url, group_id, str(table), watch_idle=False)
        query = (
            df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=TRIGGER)
            .start()
        )
        return checkpoint, query

    first_checkpoint, first = start(1)
    second = None
    try:
        wait_for(
            lambda: stored_offsets(engine, group_id) == at_end(topic, 2, 30),
            what="the first run's commits",
            query=first,
        )
        reset = client.reset_offsets(group_id, topics={topic: []}, to_offset=10)
        assert {(c.partition, c.previous_offset, c.new_offset) for c in reset.changes} == {(0, 30, 10), (1, 30, 10)}
        # New records: the running query's next batch meets the reset's new generation.
        write_log_end(log_end, _ends(topic, 2, 40))
        assert _stale(first)
        assert stored_offsets(engine, group_id) == at_end(topic, 2, 10)

        second_checkpoint, second = start(2)
        assert second_checkpoint != first_checkpoint
        wait_for(
            lambda: stored_offsets(engine, group_id) == at_end(topic, 2, 40), what="the restart's commits", query=second
        )
    finally:
        for q in (first, second):
            if q is not None and q.isActive:
                q.stop()

    rows = table.rows('topic, "partition", "offset", run')
    by_run = {run: sorted((t, p, o) for t, p, o, r in rows if r == run) for run in (1, 2)}
    assert by_run[1] == sorted(records(topic, 2, 30)), "the fenced run wrote after the reset"
    assert by_run[2] == sorted(records(topic, 2, 40, start=10)), "the restart did not replay from the reset offset"
    # The history, oldest first: the first run's commits, the reset, the restart's commits.
    history = list(reversed(client.list_offset_history(group_id, page_size=1000).items))
    at = [c.kind for c in history].index(ChangeKind.RESET)
    assert {c.kind for c in history[:at]} == {ChangeKind.COMMIT}
    assert [c.kind for c in history[at : at + 2]] == [ChangeKind.RESET] * 2
    restart = history[at + 2 :]
    assert restart and all(c.kind == ChangeKind.COMMIT and c.generation > reset.generation for c in restart)


def test_a_reset_stops_an_idle_query_between_batches(
    spark, database_url, engine, client, group_id, topic, make_table, tmp_path
):
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="driver")
    # Every record read, and no more coming: the sink is not called again.
    df = kafka_stream(spark, topic, partitions=2, records=20)
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    try:
        wait_for(lambda: stored_offsets(engine, group_id) == at_end(topic, 2, 20), what="the commits", query=query)
        client.reset_offsets(group_id, topics={topic: []}, to_offset=5)

        # Spark's idle event (every noDataProgressEventInterval, 10 s) finds the new generation.
        wait_for(lambda: not query.isActive, what="the idle query to stop")
    finally:
        if query.isActive:
            query.stop()

    assert query.exception() is None
    assert stored_offsets(engine, group_id) == at_end(topic, 2, 5), "the fenced run wrote after the reset"
    table.assert_exactly_once(records(topic, 2, 20))


def test_a_group_deleted_before_its_first_commit_never_hands_the_runs_generation_out_again(
    spark, database_url, engine, group_id, topic, make_table, tmp_path
):
    table = make_table()
    sink = ExactlyOnceSink(database_url, group_id, str(table), write_path="executors")
    rival: dict[str, int] = {}

    def meanwhile(stage: str, batch_id: int) -> None:
        # The run has joined and staged its rows, the group has no offsets yet: an operator
        # deletes the group and another writer joins it before the run commits.
        if stage == "staged" and not rival:
            with engine.begin() as conn:
                storage.delete_offsets(conn, group_id, all_topics=True, actor="operator")
            with engine.begin() as conn:
                rival["generation"] = storage.join_group(conn, group_id, "rival")

    with _faults.installed(driver=meanwhile), pytest.raises(StreamingQueryException, match="StaleGenerationError"):
        run_available_now(kafka_stream(spark, topic, partitions=2, records=10), sink, tmp_path / "checkpoint")

    assert rival["generation"] > sink.generation, "the rival must never get the run's generation again"
    assert table.coordinates() == [] and stored_offsets(engine, group_id) == {}
