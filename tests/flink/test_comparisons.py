"""What the offsetstore sink replaces, run the same way: Flink's JDBC sink at least once duplicates, its XA mode is refused by PostgreSQL's defaults.

Also the bad input a user meets first: a group the store has no offsets for, with the
initializer's FAIL fallback, stops the job with one line naming the partitions.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.kafka_integration.local_kafka import KafkaCluster
from tests.fixtures.fix_flink import FlinkJobs, completed_checkpoints, produce
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.flink, pytest.mark.timeout(600)]


def count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())


def count_distinct(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(f'SELECT count(DISTINCT (topic, "partition", "offset")) FROM {table}').scalar_one()
        )


def test_flinks_at_least_once_jdbc_sink_killed_and_restored_from_an_old_checkpoint_duplicates(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    copy_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    partitions, per_partition = 2, 5_000
    kafka_broker.create_topic(topic, partitions)
    expected = produce(kafka_broker, topic, partitions, per_partition)
    job = {"topic": topic, "group": group_id, "table": copy_table, "checkpoints": tmp_path, "bounded": "yes",
           "sink": "jdbc"}  # fmt: skip

    run = flink_jobs.start(**job, run=1, rate=500)
    wait_for(lambda: count(engine, copy_table) > 0, "the JDBC sink's first rows", seconds=300)
    old = int(run.wait_line(r"checkpoint (\d+) complete").group(1))
    written = count(engine, copy_table)
    wait_for(lambda: count(engine, copy_table) > written, "rows after the old checkpoint", seconds=300)
    run.kill()
    (restore,) = [c for c in completed_checkpoints(tmp_path) if c.name == f"chk-{old}"]

    run = flink_jobs.start(**job, run=2, restore=restore)
    # Until every record is in: the claim is the duplicates, not the JDBC job's clean end (seen to idle once, unended).
    wait_for(lambda: count_distinct(engine, copy_table) == len(expected), "every record in the table", seconds=300)
    run.kill()
    with engine.connect() as conn:
        found = Counter(
            tuple(r) for r in conn.exec_driver_sql(f'SELECT topic, "partition", "offset" FROM {copy_table}')
        )
    assert set(found) == expected
    duplicates = sum(n - 1 for n in found.values())
    print(f"Flink's at-least-once JDBC sink: {duplicates} of {len(expected)} records written twice")
    assert duplicates > 0


def test_flinks_xa_sink_is_refused_by_postgresqls_default_max_prepared_transactions(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    copy_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    with engine.connect() as conn:
        if conn.exec_driver_sql("SHOW max_prepared_transactions").scalar_one() != "0":
            pytest.skip("this PostgreSQL allows prepared transactions: the default (0) is what users meet")
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker, topic, 1, 100)
    run = flink_jobs.start(topic=topic, group=group_id, table=copy_table, checkpoints=tmp_path, bounded="yes",
                           sink="xa", restarts=0)  # fmt: skip
    assert run.finish() == 2, run.lines[-10:]
    print(run.lines[-1])
    assert "prepared transactions are disabled" in run.lines[-1], run.lines[-10:]
    assert count(engine, copy_table) == 0


def test_a_group_without_offsets_and_the_fail_fallback_stops_the_job_naming_the_partitions(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    copy_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker, topic, 2, 10)
    run = flink_jobs.start(topic=topic, group=group_id, table=copy_table, checkpoints=tmp_path, bounded="yes",
                           fallback="FAIL", restarts=0)  # fmt: skip
    assert run.finish() == 2, run.lines[-10:]
    assert f"group {group_id} has no stored offset for [" in run.lines[-1], run.lines[-10:]
    assert f"{topic}-0" in run.lines[-1] and f"{topic}-1" in run.lines[-1]
    assert count(engine, copy_table) == 0
