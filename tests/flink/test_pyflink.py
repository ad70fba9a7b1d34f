"""A PyFlink job (examples/flink/copy_topic.py) through offsetstore's sink: SIGKILLed, restarted with no checkpoint, every record once.

PyFlink runs in a venv of its own (apache-flink cannot share the project's: tests/fixtures/fix_pyflink.py),
on PyFlink's local MiniCluster, against the session's Kafka broker and the machine's PostgreSQL over JDBC.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.kafka_integration.local_kafka import KafkaCluster
from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_flink import produce
from tests.fixtures.fix_pyflink import PyFlinkJobs, kill_job
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.flink, pytest.mark.timeout(600)]  # the first run makes PyFlink's venv (minutes)

PARTITIONS = 2
WAVE = 1_000  # records per partition and wave; three waves: 6,000 records


def table_rows(engine: sa.Engine, table: str) -> list[tuple[str, int, int, str | None]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f'SELECT topic, "partition", "offset", value FROM {table}')]


def more(broker: KafkaCluster, topic: str, wave: int) -> set[tuple[str, int, int]]:
    """The ``wave``-th WAVE records per partition (offsets go on from the waves before)."""
    return {(t, p, o + wave * WAVE) for t, p, o in produce(broker, topic, PARTITIONS, WAVE)}


def test_a_pyflink_job_killed_and_restarted_without_a_checkpoint_writes_every_record_once(
    pyflink_jobs: PyFlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    rows_table: str,
) -> None:  # fmt: skip
    kafka_broker.create_topic(topic, PARTITIONS)
    expected = more(kafka_broker, topic, 0)
    job = {"topic": topic, "group": group_id, "table": rows_table}

    # 1. A new group: the store has no offsets, the initializer's fallback starts at the log's beginning.
    run = pyflink_jobs.start(**job)
    wait_for(lambda: run.poll() is not None or sum(stored_offsets(engine, group_id).values()) == len(expected),
             "the first wave written and its offsets stored", seconds=120)  # fmt: skip
    assert run.poll() is None, run.communicate()[1][-3000:]
    expected |= more(kafka_broker, topic, 1)
    kill_job(run)  # mid-run: the second wave is being read, buffered or flushed
    assert run.returncode < 0
    at_kill = sum(stored_offsets(engine, group_id).values())
    assert PARTITIONS * WAVE <= at_kill <= 2 * PARTITIONS * WAVE

    # 2. No checkpoint: the store's positions, to the topic's end.
    expected |= more(kafka_broker, topic, 2)
    run = pyflink_jobs.start(**job, bounded=True)
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err[-3000:]
    assert out.splitlines()[-1] == "done"

    found = table_rows(engine, rows_table)
    assert_exactly_once([(t, p, o) for t, p, o, _ in found], expected)
    assert all(v == f"p{p}-o{o % WAVE}" for _, p, o, v in found)
    assert stored_offsets(engine, group_id) == {(topic, p): 3 * WAVE for p in range(PARTITIONS)}


def test_jars_built_for_another_flink_fail_the_job_with_one_line_naming_both_versions(
    pyflink_jobs: PyFlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    rows_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    # The sink jar as an offsetstore pinned to Flink 2.1 builds it: its manifest names the Flink it was compiled for.
    jars = pyflink_jobs.jars.split(";")
    sink = Path(jars[0].removeprefix("file://"))
    other = tmp_path / "offsetstore-flink-2.1.1.jar"
    with zipfile.ZipFile(sink) as src, zipfile.ZipFile(other, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "META-INF/MANIFEST.MF":
                data = data.replace(b"Version: 2.2.0", b"Version: 2.1.1").replace(b"5.0.0-2.2", b"4.0.0-2.0")
            dst.writestr(item, data)
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker, topic, 1, 10)

    run = pyflink_jobs.start(topic=topic, group=group_id, table=rows_table, bounded=True,
                             jars=";".join([other.as_uri(), *jars[1:]]))  # fmt: skip
    _, err = run.communicate(timeout=120)
    assert run.returncode != 0
    assert err.splitlines()[-1] == (
        "offsetstore.pyflink_integration.FlinkVersionMismatch: offsetstore: the sink jar is built for Flink 2.1.1 "
        "(flink-connector-kafka 4.0.0-2.0); this PyFlink is apache-flink 2.2.0: pip install apache-flink==2.1.1"
    )
    assert table_rows(engine, rows_table) == []
    assert stored_offsets(engine, group_id) == {}
