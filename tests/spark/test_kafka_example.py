"""docs/spark.md's worked example on Apache Kafka and Spark's own Kafka source: killed, reset and restarted, each record once.

The guide's job (step 3, extracted from the page) and ``examples/spark/orders_job.py``
take turns on one group, topic, table and checkpoint base, as two deployments of the same
job would: SIGKILLed at random points of their progress, in the middle of a batch's
transaction and just after a commit; the checkpoint directory deleted; a live reset
backwards and one forwards. Under ``local-cluster`` (each driver start brings up a master, two
workers and their executor JVMs: about three minutes a start in CI) the two kills, the lost
checkpoint and the run to the end only. The table's trigger logs every row the sink writes, so a
record's deliveries are counted, not inferred from the table's key.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from offsetstore.core.types import ChangeKind
from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_server import all_history
from tests.fixtures.fix_spark import LOCAL_CLUSTER
from tests.fixtures.fix_spark_kafka import (
    EXAMPLE,
    CountingTable,
    Job,
    guide_job,
    job_env,
    launcher,
    make_topic,
    passes,
    produce,
    sink_transaction_open,
    tally,
)

# Eight driver starts under local[*] (about 5 minutes in CI), three under local-cluster (about 9).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

OFFSETSTORE = Path(sys.executable).with_name("offsetstore")
PARTITIONS = 3  # the guide's topic
WAVE = 4000  # records per partition and wave; five waves under local[*] (60,000 records), two under local-cluster
PER_TRIGGER = 3000  # the example's --max-offsets-per-trigger (the guide's job keeps its 100,000)
RESET_BACK, RESET_FORWARD = 1000, 500


@pytest.mark.parametrize("master", [None, LOCAL_CLUSTER], ids=["local[*]", "local-cluster"])
def test_the_guide_and_the_example_deliver_every_kafka_record_once_through_kills_resets_and_a_lost_checkpoint(
    kafka_connector_jars, kafka_broker, database_url, engine, server, client, tmp_path, master, request
):
    if master is not None:  # local-cluster's executor folders under SPARK_HOME/work, removed afterwards
        request.getfixturevalue("cluster_work_dirs")
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    name = f"orders-spark-{uuid.uuid4().hex[:8]}"  # group and topic, as the guide names both alike
    make_topic(kafka_broker, name, PARTITIONS)
    table = CountingTable.create(engine)
    checkpoints = tmp_path / "checkpoints"
    env = job_env(tmp_path)
    run = launcher(master, kafka_connector_jars)
    guide = [*run, str(guide_job(
        tmp_path / "guide_job.py", url=database_url, bootstrap=kafka_broker.bootstrap, group=name, table=table.name,
        checkpoints=checkpoints,
    ))]  # fmt: skip
    example = [
        *run, str(EXAMPLE), "--source", "kafka", "--bootstrap-servers", kafka_broker.bootstrap,
        "--database-url", database_url, "--group", name, "--topic", name, "--table", table.name,
        "--checkpoint-base", str(checkpoints), "--max-offsets-per-trigger", str(PER_TRIGGER), "--quiet",
    ]  # fmt: skip
    log = tmp_path / "jobs.log"
    produced, waves = 0, 0
    kills: list[str] = []
    # Each pass is a stretch of offsets the sink must deliver once: (why, start, end) per partition.
    delivered: list[tuple[str, dict[int, int], dict[int, int]]] = []

    def wave() -> None:
        nonlocal produced, waves
        produce(kafka_broker, name, PARTITIONS, produced, produced + WAVE)
        produced += WAVE
        waves += 1

    def stored() -> dict[int, int]:
        return {p: o for (_, p), o in stored_offsets(engine, name).items()}

    def progress() -> int:
        return sum(stored().values())

    jobs: list[Job] = []

    def start(command: list[str]) -> Job:
        jobs.append(Job(command, log, env=env, cwd=tmp_path))
        return jobs[-1]

    def kill(job: Job, where: str) -> None:
        job.kill()
        kills.append(where)

    def reset(shift: int) -> tuple[dict[int, int], dict[int, int]]:
        """The operator's live reset (docs/spark.md step 5); each partition's offset before and after it."""
        done = subprocess.run(
            [str(OFFSETSTORE), "groups", "reset", name, "--topic", name, "--shift-by", str(shift), "--execute",
             "--server", server.address],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        resets = [c for c in all_history(client, name) if c.kind == ChangeKind.RESET]
        last = [c for c in resets if c.generation == max(r.generation for r in resets)]
        assert len(last) == PARTITIONS, last
        return {c.partition: c.previous_offset for c in last}, {c.partition: c.new_offset for c in last}

    try:
        wave()
        # 1. The example, killed at a random point of its progress.
        job = start(example)
        threshold = rng.randrange(1, PARTITIONS * WAVE)
        job.wait_until(lambda: progress() >= threshold, f"{threshold} records committed")
        kill(job, f"example after {progress()} records")

        # 2. The guide's job, killed in the middle of a batch: its transaction open.
        wave()
        job = start(guide)
        job.wait_until(lambda: sink_transaction_open(engine), "a batch's transaction")
        kill(job, "guide mid-batch (a transaction of the sink open)")

        # 3. The checkpoint directory is lost: every later run starts from the store alone.
        shutil.rmtree(checkpoints)

        # The live resets (steps 5 to 7) are the driver's: fenced and restarted the same way whatever
        # runs the executors, so local-cluster (its driver starts take the longest) runs the kills, the
        # lost checkpoint and the run to the end.
        resets = master is None
        start_f: dict[int, int] = {}
        if resets:
            # 4. The guide's job from the store alone (no checkpoint), killed just after its first commit: a
            # new wave first, or the killed runs may have read every record and no commit would come.
            wave()
            before = progress()
            job = start(guide)
            job.wait_until(lambda: progress() > before, "a commit")
            kill(job, "guide right after a commit")

            # 5. The example, busy with a new wave, and a live reset backwards: it is fenced (exit 3).
            wave()
            job = start(example)
            before = progress()
            job.wait_until(lambda: progress() > before, "a commit")
            old, new = reset(-RESET_BACK)
            assert all(old[p] - new[p] == RESET_BACK for p in old), (old, new)
            assert job.wait() == 3, job.output()
            delivered.append(("until the backward reset", {}, old))

            # 6. The guide's job on the fresh checkpoint (reset-1): re-delivers, killed mid-batch, in the
            # transaction that writes its rows (the sink joins the group in the batch's first one).
            job = start(guide)
            job.wait_until(lambda: job.said("joined group") and sink_transaction_open(engine), "a batch's write")
            kill(job, "guide mid-batch (its write transaction open)")

            # 7. A live reset forwards: the records it skips are never delivered, on purpose. It waits for a
            # second commit of this run: the first reports the replayed batch's end as the log end, and a
            # shift forwards is capped at the last log end reported.
            wave()
            job = start(example)
            before = progress()
            job.wait_until(lambda: progress() > before, "a commit")
            first = progress()
            job.wait_until(lambda: progress() > first, "a second commit")
            old_f, new_f = reset(RESET_FORWARD)
            assert job.wait() == 3, job.output()
            delivered.append(("after the backward reset", new, old_f))
            start_f = new_f

        # 8. The example to the end of the topic.
        job = start([*example, "--until-caught-up"])
        assert job.wait() == 0, job.output()
        delivered.append(
            ("after the forward reset" if resets else "every run", start_f, {p: produced for p in range(PARTITIONS)})
        )

        assert stored() == {p: produced for p in range(PARTITIONS)}
        expected = passes(name, delivered)
        duplicates, lost = tally(table.deliveries(), expected)
        records = PARTITIONS * produced
        skipped = sum(new_f[p] - old_f[p] for p in new_f) if resets else 0
        print(
            f"\n{master or 'local[*]'} (seed {seed}): {records} records in {waves} waves, {len(kills)} kills "
            f"({'; '.join(kills)}), "
            + (f"resets -{RESET_BACK} and +{RESET_FORWARD} (skipped {skipped}) live, " if resets else "")
            + f"checkpoint deleted once: {sum(expected.values())} deliveries expected, {duplicates} duplicates, {lost} lost"
        )
        assert (duplicates, lost) == (0, 0), f"seed {seed}"
        assert table.keys() == set(expected)
        assert len(kills) == (4 if resets else 2)
    finally:
        for job in jobs:
            job.kill()  # whatever a failed step left running
        table.drop()
