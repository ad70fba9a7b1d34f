"""The Spark sink across a failover: its transaction in flight when the primary dies is retried on the promoted standby.

The sink runs on libpq's multi-host URL over a primary and a synchronous standby (issue 32).
The primary is SIGKILLed at a point of a batch: with the transaction open, or right after
its COMMIT (before Spark recorded the batch). Spark's query fails, a supervisor restarts it on
the same checkpoint, the batch is replayed on the new primary, and each record lands once.
"""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from offsetstore.spark_integration import ExactlyOnceSink, _faults
from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_pg_cluster import PgCluster
from tests.fixtures.fix_production import migrate
from tests.fixtures.fix_spark import KAFKA_TABLE, kafka_stream, records, run_available_now

pytestmark = pytest.mark.spark

PARTITIONS, RECORDS, PER_TRIGGER = 3, 40, 24


@pytest.mark.parametrize("stage", ["in_transaction", "committed"])
def test_each_record_lands_once_across_a_failover_in_a_batch(
    spark, sync_cluster: PgCluster, topic: str, tmp_path, stage: str
) -> None:
    url = sync_cluster.url()
    migrate(url)
    sync_cluster.primary.query(KAFKA_TABLE.format(table="public.failover_sink", extra=""))
    failed_over: list[int] = []

    def hook(at: str, batch_id: int) -> None:
        if at == stage and batch_id == 2 and not failed_over:
            sync_cluster.failover()
            failed_over.append(batch_id)

    sink = ExactlyOnceSink(url, "spark-failover", "public.failover_sink", write_path="driver", watch_idle=False)
    failures = []
    with _faults.installed(driver=hook):
        # A supervisor's restarts, on the same checkpoint; a batch's failure fails the query.
        for _ in range(5):
            df = kafka_stream(spark, topic, partitions=PARTITIONS, records=RECORDS, maxOffsetsPerTrigger=PER_TRIGGER)
            try:
                run_available_now(df, sink, tmp_path / "checkpoint")
                break
            except StreamingQueryException as error:
                failures.append(str(error).splitlines()[0][:300])
        else:
            raise AssertionError(f"the query never finished: {failures}")
    assert failed_over, "the failover did not happen in a batch"
    print(f"\nspark failover at {stage}: query restarts {len(failures)}: {failures}")

    with sync_cluster.standby.connect() as conn:
        found = conn.execute('SELECT topic, "partition", "offset" FROM public.failover_sink').fetchall()
        stored = dict(
            conn.execute(
                'SELECT "partition", "offset" FROM offsetstore.offsets WHERE group_id = \'spark-failover\''
            ).fetchall()
        )
    assert_exactly_once([tuple(r) for r in found], records(topic, PARTITIONS, RECORDS))
    assert stored == {p: RECORDS for p in range(PARTITIONS)}
