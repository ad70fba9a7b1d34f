"""Flink's Kafka source into PostgreSQL through the offsetstore sink, on a real broker, SIGKILLed and restored: every record once.

Each run is examples/flink/CopyTopicJob in a MiniCluster JVM of its own (JobManager,
TaskManager and tasks in one process), killed with SIGKILL; runs restore from the latest
checkpoint, an OLD one, or none (the store's positions, through the offsets initializer).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.kafka_integration.local_kafka import KafkaCluster
from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_flink import FlinkJobs, completed_checkpoints, produce
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.flink, pytest.mark.timeout(600)]

PARTITIONS = 4
PER_PARTITION = 12_500  # 50,000 records
THROTTLE = {"rate": 2000}  # records/s per subtask (2 subtasks): runs are killed before the topic's end


def rows(engine: sa.Engine, table: str) -> list[tuple[str, int, int, str, int]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f'SELECT topic, "partition", "offset", value, run FROM {table}')]


def test_killed_restored_from_latest_old_and_no_checkpoint_every_record_once(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    copy_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    kafka_broker.create_topic(topic, PARTITIONS)
    expected = produce(kafka_broker, topic, PARTITIONS, PER_PARTITION)
    checkpoints = tmp_path / "checkpoints"
    job = {"topic": topic, "group": group_id, "table": copy_table, "checkpoints": checkpoints, "bounded": "yes"}
    progress = []

    # 1. No checkpoint, a new group: the initializer's fallback starts at the log's beginning.
    run = flink_jobs.start(**job, run=1, **THROTTLE)
    run.wait_line(r"flushed [1-9]")
    old = int(run.wait_line(r"checkpoint (\d+) complete").group(1))  # kept for step 3: an OLD checkpoint
    run.wait_line(r"flushed [1-9]")
    run.wait_line(r"checkpoint \d+ complete")
    run.kill()
    progress.append(sum(stored_offsets(engine, group_id).values()))
    (first,) = [c for c in completed_checkpoints(checkpoints) if c.name == f"chk-{old}"]

    # 2. From the latest checkpoint.
    run = flink_jobs.start(**job, run=2, restore=completed_checkpoints(checkpoints)[-1], **THROTTLE)
    run.wait_line(r"flushed [1-9]")
    run.wait_line(r"checkpoint \d+ complete")
    run.kill()
    progress.append(sum(stored_offsets(engine, group_id).values()))

    # 3. From the OLD first checkpoint, killed between a barrier (the sink has committed) and the checkpoint's completion.
    run = flink_jobs.start(**job, run=3, restore=first, hold_ms=1500, **THROTTLE)
    run.wait_line(r"flushed \d+ rows .* [1-9]\d* skipped")  # the old checkpoint's replay met the store's rows
    run.wait_line(r"flushed [1-9]\d* rows")  # a barrier's transaction committed ...
    held = int(run.wait_line(r"holding checkpoint (\d+)").group(1))
    run.kill()  # ... and its checkpoint is held open for 1.5 s: it never completes
    assert not any(f"checkpoint {held} complete" in line for line in run.lines)
    progress.append(sum(stored_offsets(engine, group_id).values()))

    # 4. From the latest completed checkpoint, which is behind the store by the held checkpoint's flush.
    run = flink_jobs.start(**job, run=4, restore=completed_checkpoints(checkpoints)[-1], **THROTTLE)
    run.wait_line(r"flushed \d+ rows .* [1-9]\d* skipped")  # the killed barrier's rows, replayed, skipped
    run.wait_line(r"checkpoint \d+ complete")
    run.kill()
    progress.append(sum(stored_offsets(engine, group_id).values()))

    # The store moved forward with every run but the 4th, which may die before its replay passes the store.
    assert all(a < b for a, b in zip([0, *progress[:3]], progress[:3], strict=False)), progress
    assert progress[3] >= progress[2], progress
    assert progress[-1] < len(expected), "the topic ended before the last kill: throttle more"

    # 5. No checkpoint at all: the store's positions, to the topic's end.
    run = flink_jobs.start(**job, run=5)
    assert run.finish() == 0, run.lines[-10:]
    assert run.lines[-1] == "done"

    found = rows(engine, copy_table)
    assert_exactly_once([(t, p, o) for t, p, o, _, _ in found], expected)
    assert all(v == f"p{p}-o{o}" for _, p, o, v, _ in found)
    assert {1, 2, 3, 5} <= set(Counter(r for *_, r in found)), "every run but the 4th wrote"
    assert stored_offsets(engine, group_id) == {(topic, p): PER_PARTITION for p in range(PARTITIONS)}


def test_a_live_reset_fences_the_job_and_the_next_one_redelivers_the_range_once(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    copy_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    partitions, per_partition, reset_to = 2, 5_000, 200
    kafka_broker.create_topic(topic, partitions)
    expected = produce(kafka_broker, topic, partitions, per_partition)
    job = {"topic": topic, "group": group_id, "table": copy_table, "checkpoints": tmp_path, "bounded": "yes"}

    run = flink_jobs.start(**job, run=1, rate=500, restarts=3)
    wait_for(lambda: len(written := stored_offsets(engine, group_id)) == partitions and min(written.values()) > reset_to,
             "the job's flushes past the reset's target", seconds=300)  # fmt: skip
    with engine.begin() as conn:
        storage.reset_offsets(conn, group_id, all_topics=True, to_offset=reset_to, actor="test")
    # The next flush is refused: no restart (the fence is not recoverable), nothing written after the reset.
    assert run.finish() == 2
    assert "FencedException" in run.lines[-1] and f"group {group_id} fenced generation" in run.lines[-1], run.lines[-1]
    # With the guide's Log4j file, the fence is one line per fenced writer (the sink's ERROR) and the job's last
    # line: no stack trace, no message repeated by Flink (docs/flink.md, step 5).
    fenced = [line for line in run.lines if "fenced generation" in line]
    assert all(line.startswith(f"offsetstore: group {group_id} fenced") for line in fenced[:-1]), fenced
    assert 1 < len(fenced) <= 1 + 2, fenced  # CopyTopicJob's parallelism: 2 writers
    assert not [line for line in run.lines if line.startswith(("\tat ", "Caused by"))], run.lines[-20:]
    first = rows(engine, copy_table)

    run = flink_jobs.start(**job, run=2)  # no checkpoint: from the store's positions
    assert run.finish() == 0, run.lines[-10:]

    found = rows(engine, copy_table)
    ran1 = Counter((t, p, o) for t, p, o, _, r in found if r == 1)
    ran2 = Counter((t, p, o) for t, p, o, _, r in found if r == 2)
    assert len(found) - len(first) == sum(ran2.values()), "the fenced job wrote after the reset"
    assert max(ran1.values()) == 1 and max(ran2.values()) == 1
    reached = {p: max(o for _, q, o in ran1 if q == p) + 1 for p in range(partitions)}
    assert set(ran1) == {(topic, p, o) for p in range(partitions) for o in range(reached[p])}
    assert set(ran2) == {(topic, p, o) for p in range(partitions) for o in range(reset_to, per_partition)}
    assert set(ran1) | set(ran2) == expected
    assert stored_offsets(engine, group_id) == {(topic, p): per_partition for p in range(partitions)}


def test_the_stores_connection_lost_between_flushes_fails_the_flush_and_the_restart_writes_every_record_once(
    flink_jobs: FlinkJobs, kafka_broker: KafkaCluster, engine: sa.Engine, group_id: str, topic: str,
    copy_table: str, tmp_path: Path,
) -> None:  # fmt: skip
    partitions, per_partition = 2, 5_000
    kafka_broker.create_topic(topic, partitions)
    expected = produce(kafka_broker, topic, partitions, per_partition)
    run = flink_jobs.start(topic=topic, group=group_id, table=copy_table, checkpoints=tmp_path, bounded="yes",
                           run=1, rate=500, restarts=3)  # fmt: skip
    run.wait_line(r"flushed [1-9]")
    with engine.connect() as conn:  # as PostgreSQL's restart does to every session
        ended = conn.exec_driver_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'offsetstore-flink' AND datname = current_database()"
        ).scalar_one()
    assert ended > 0
    run.wait_line(r"offsetstore: flush of \d+ rows to group \S+ failed; nothing of it was written")
    assert run.finish() == 0, run.lines[-10:]
    assert run.lines[-1] == "done"
    found = rows(engine, copy_table)
    assert_exactly_once([(t, p, o) for t, p, o, _, _ in found], expected)
    assert stored_offsets(engine, group_id) == {(topic, p): per_partition for p in range(partitions)}
