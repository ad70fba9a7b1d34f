"""Issue 58's planned cutover for Flink: docs/flink.md's job reads A, `groups switch` moves its group to B mid-stream, the
same job resumes on B's ``A.<topic>``; every record in the sink table exactly once.

On :func:`mirrored_kafka` (two KRaft clusters, MirrorMaker 2; the topic written on A by a transactional
producer with aborts, its log start moved on partition 0), A's and B's offsets of a record differ:
only the fingerprints the Flink sink stored (the last record of each partition it flushed, hashed as
fingerprints.py hashes it) place the group on B. Cost: the session's MirrorMaker fixture (shared; 30-123 s to
start under load) and three Flink MiniCluster JVMs of 10-20 s each.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_flink import FlinkJobs, flink_jobs_on
from tests.fixtures.fix_mirror_maker import MirroredKafka
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.flink, pytest.mark.kafka, pytest.mark.xdist_group("mirror_maker"),
              pytest.mark.timeout(900)]  # fmt: skip


@pytest.fixture
def jobs_on_a(mirrored_kafka: MirroredKafka, database_url: str) -> FlinkJobs:
    return flink_jobs_on(mirrored_kafka.source, database_url)


def test_the_flink_job_switched_mid_stream_from_a_to_b_exactly_once(
    mirrored_kafka: MirroredKafka, jobs_on_a: FlinkJobs, engine: sa.Engine, group_id: str, copy_table: str,
    groups, tmp_path: Path,
) -> None:  # fmt: skip
    a, b = mirrored_kafka.source, mirrored_kafka.target
    topic = mirrored_kafka.new_topic(f"orders-flink-{uuid.uuid4().hex[:8]}", transactions=300, seed=58)
    total = sum(len(rs) for rs in mirrored_kafka.source_records(topic).values())
    job = {"topic": topic.name, "group": group_id, "table": copy_table, "isolation_level": "read_committed"}

    # 1. On A, throttled (30 records/s per subtask): the switch comes while it is mid-stream.
    run = jobs_on_a.start(**job, checkpoints=tmp_path / "a", run=1, rate=30)
    run.wait_line(r"flushed [1-9]")
    wait_for(lambda: len(stored_offsets(engine, group_id)) == topic.partitions, "a stored offset on every partition",
             seconds=120)  # fmt: skip
    a_id = groups("describe", group_id, "--output", "json").json()["kafka_cluster_id"]
    assert a_id, "the sink bound the group to A"

    # 2. Planned: A's producer is still (MirrorMaker has it all); the switch fences the job, plans, moves the group.
    mirrored_kafka.wait_mirrored(topic)
    argv = ["switch", group_id, "--to-bootstrap-server", b.bootstrap, "--from-bootstrap-server", a.bootstrap,
            "--replication-policy", "default", "--source-alias", "A", "--output", "json", "--execute"]  # fmt: skip
    done = groups(*argv)
    assert done.code == 0, done.err
    moved = done.json()["partitions"]
    print("plan", [(r["partition"], r["source_offset"], r["target_offset"], r["method"]) for r in moved])
    assert [(r["target_topic"], r["method"], r["rereads_at_most"], r["missing"]) for r in moved] == [
        (topic.remote, "exact", 0, 0)
    ] * topic.partitions
    assert done.json()["from_cluster_id"] == a_id
    b_id = done.json()["to_cluster_id"]
    at_a = sum(r["source_offset"] for r in moved)
    run.wait_line(r"failed: .*FencedException: offsetstore: group .* fenced generation", timeout=120)
    assert run.finish() == 2
    assert groups("describe", group_id, "--output", "json").json()["kafka_cluster_id"] == b_id

    # A job on A again is refused at its start: the group is B's now.
    late = jobs_on_a.start(**job, checkpoints=tmp_path / "late", run=9, bounded="yes")
    late.wait_line(rf"is bound to Kafka cluster {b_id}, and this consumer reads cluster {a_id}", timeout=180)
    late.finish()

    # 3. Mid-stream: A's producer goes on (MirrorMaker copies it); the same job resumes on B with no checkpoint.
    topic.writer.write(30)
    mirrored_kafka.wait_mirrored(topic)
    on_b = jobs_on_a.start(**{**job, "topic": topic.remote}, checkpoints=tmp_path / "b", run=2, bounded="yes",
                           bootstrap=b.bootstrap)  # fmt: skip
    on_b.wait_line(r"^done$", timeout=300)
    assert on_b.finish() == 0

    expected = {r.id for rs in mirrored_kafka.source_records(topic).values() for r in rs}
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT value, run FROM {copy_table}").fetchall()
    seen = Counter(value for value, _ in rows)
    rereads = sum(n - 1 for n in seen.values() if n > 1)
    lost = len(expected - set(seen))
    runs = Counter(run for _, run in rows)
    print(f"{len(expected)} records ({total} before the switch's writes), A wrote {runs[1]} (to {at_a} in A's "
          f"offsets), B {runs[2]}: {rereads} re-reads, {lost} lost")  # fmt: skip
    assert (rereads, lost, set(seen) - expected) == (0, 0, set())
    assert runs[1] > 0 and runs[2] > 0 and 9 not in runs
