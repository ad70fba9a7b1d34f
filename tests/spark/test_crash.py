"""Crash recovery: the driver is SIGKILLed at every point of a batch and restarted; each record lands once."""

from __future__ import annotations

import shutil
import signal

import pytest

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import MASTER, at_end, records, run_driver, staging_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# 24 records a trigger over 3 partitions: 8 per partition, so batches 0..4 cover 0..40.
PARTITIONS, RECORDS, PER_TRIGGER = 3, 40, 24


# Each crash point once, under local[2,4]. Drivers killed with executors in JVMs of their own
# (local-cluster) are tests/spark/test_kafka_example.py's second run (random points, mid-batch,
# just after a commit, on Apache Kafka) and test_cluster.py's executor killed mid-copy; this
# test's own local-cluster run (about 5 minutes) was dropped for CI's time.
def test_a_driver_killed_anywhere_in_a_batch_loses_and_repeats_nothing(
    jdk, database_url, engine, group_id, topic, make_table, tmp_path
):
    master = MASTER
    table = make_table()
    checkpoint = tmp_path / "checkpoint"
    common = [
        "--database-url", database_url,
        "--group-id", group_id,
        "--table", str(table),
        "--topic", topic,
        "--partitions", str(PARTITIONS),
        "--records", str(RECORDS),
        "--max-offsets-per-trigger", str(PER_TRIGGER),
        "--checkpoint", str(checkpoint),
        "--workdir", str(tmp_path / "spark"),
        "--master", master,
    ]  # fmt: skip

    def consistent() -> dict:
        """The table holds exactly the records below the stored offsets: never more, never less."""
        stored = stored_offsets(engine, group_id)
        table.assert_exactly_once({(t, p, o) for (t, p), end in stored.items() for o in range(end)})
        return stored

    # Each run restarts on the checkpoint the previous one died with; Spark replays
    # the batch it had planned but not recorded, then dies at the next point.
    crashes = [
        # (write path, stage, batch, stored offset per partition after the crash)
        ("driver", "start", 1, 8),  # before the transaction
        ("driver", "in_transaction", 2, 16),  # everything written, not committed
        ("executors", "committed", 3, 32),  # committed, Spark has not recorded the batch
        ("executors", "staged", 4, 32),  # rows staged by the executors, not moved
    ]
    for path, stage, batch, end in crashes:
        status, out = run_driver(*common, "--write-path", path, "--crash-stage", stage, "--crash-batch", str(batch))
        assert status == -signal.SIGKILL and f"crashing at {stage} of batch {batch}" in out, out[-3000:]
        assert consistent() == at_end(topic, PARTITIONS, end), f"after the crash at {stage}"
    assert staging_rows(engine, table, group_id), "the crashed run left no staged rows: the cleanup is untested"

    # The checkpoint is lost: the next run starts where the store says.
    shutil.rmtree(checkpoint)
    status, out = run_driver(*common, "--write-path", "driver", "--from-store")
    assert status == 0 and "finished" in out, out[-3000:]

    table.assert_exactly_once(records(topic, PARTITIONS, RECORDS))
    assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, RECORDS)
    assert staging_rows(engine, table, group_id) is None, "the crashed run's staging table is still there"
