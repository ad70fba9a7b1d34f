"""A PyFlink job on a standalone cluster (a JobManager and a TaskManager process of its own), the TaskManager SIGKILLed mid-run.

Flink restarts the job from its latest checkpoint on a new TaskManager; the sink skips what the store
already holds from after that checkpoint: every record once.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from offsetstore.kafka_integration.local_kafka import KafkaCluster
from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_flink import produce
from tests.fixtures.fix_flink_cluster import FlinkCluster
from tests.fixtures.fix_pyflink import PyFlinkJobs, kill_job
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.flink, pytest.mark.timeout(600)]

PARTITIONS = 2
WAVE = 1_000


def test_a_taskmanager_sigkilled_mid_run_and_replaced_loses_and_duplicates_nothing(
    rows_table: str, pyflink_jobs: PyFlinkJobs, flink_cluster: FlinkCluster, kafka_broker: KafkaCluster,
    engine: sa.Engine, group_id: str, topic: str,
) -> None:  # fmt: skip  # rows_table first: the cluster (its job's sessions) ends before the table is dropped
    kafka_broker.create_topic(topic, PARTITIONS)

    def wave(n: int) -> set[tuple[str, int, int]]:
        return {(t, p, o + n * WAVE) for t, p, o in produce(kafka_broker, topic, PARTITIONS, WAVE)}

    def stored_all(expected: set[tuple[str, int, int]]) -> bool:
        return run.poll() is not None or sum(stored_offsets(engine, group_id).values()) == len(expected)

    expected = wave(0)
    run = flink_cluster.submit(pyflink_jobs, topic=topic, group=group_id, table=rows_table, restarts=10)
    wait_for(lambda: stored_all(expected), "the first wave written and its offsets stored", seconds=180)
    assert run.poll() is None, run.communicate()[1][-3000:]

    expected |= wave(1)
    (taskmanager,) = flink_cluster.taskmanagers
    flink_cluster.kill_taskmanager(taskmanager)  # mid-run: the second wave is being read, buffered or flushed
    at_kill = sum(stored_offsets(engine, group_id).values())
    flink_cluster.start_taskmanager()
    expected |= wave(2)
    wait_for(lambda: stored_all(expected), "every wave written after the restart", seconds=240)
    assert run.poll() is None, run.communicate()[1][-3000:]  # Flink restarted the job; it did not fail
    kill_job(run)

    with engine.begin() as conn:  # its transaction ends here: the table's teardown can drop the table
        found = [tuple(r) for r in conn.exec_driver_sql(f'SELECT topic, "partition", "offset" FROM {rows_table}')]
    assert_exactly_once(found, expected)
    assert PARTITIONS * WAVE <= at_kill < len(expected)
