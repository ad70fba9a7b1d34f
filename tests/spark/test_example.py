"""docs/spark.md's worked example, step by step as a user runs it: examples/spark/orders_job.py on the local source."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import at_end, records, run_driver, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).parents[2] / "examples" / "spark" / "orders_job.py"
OFFSETSTORE = Path(sys.executable).with_name("offsetstore")
PARTITIONS, RECORDS, PER_TRIGGER = 3, 3000, 900


def test_the_spark_guide_survives_its_own_reset_and_restart_steps(
    jdk, database_url, engine, server, group_id, topic, tmp_path
):
    table = f"public.orders_{uuid.uuid4().hex[:10]}"
    job = [
        sys.executable, str(JOB),
        "--database-url", database_url,
        "--group", group_id,
        "--topic", topic,
        "--table", table,
        "--records", str(RECORDS),
        "--max-offsets-per-trigger", str(PER_TRIGGER),
        "--checkpoint-base", str(tmp_path / "checkpoints"),
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}

    def rows() -> tuple[int, int]:
        with engine.connect() as conn:
            return tuple(
                conn.exec_driver_sql(
                    f'SELECT count(*), count(DISTINCT (topic, "partition", "offset")) FROM {table}'
                ).one()
            )

    try:
        # Step 3, run without the venv's interpreter for the workers: one line says what to do.
        base = str(Path(sys.base_prefix, "bin", "python3"))
        status, out = run_driver(*job[2:], command=job[:2], env={**env, "PYSPARK_PYTHON": base}, cwd=tmp_path)
        assert status == 2 and "set PYSPARK_PYTHON" in out.splitlines()[-1], out[-3000:]

        # Step 3, run to the end. Step 4's kill -9 in the middle is tests/spark/test_kafka_example.py's, on
        # Apache Kafka and Spark's own source (the example and the guide's job, at random points and mid-batch).
        status, out = run_driver(*job[2:], "--until-caught-up", command=job[:2], env=env, cwd=tmp_path)
        assert status == 0 and "caught up" in out, out[-3000:]
        assert rows() == (PARTITIONS * RECORDS, PARTITIONS * RECORDS)

        # Step 5: reset back 1000 and restart: the records come again and overwrite themselves.
        reset = subprocess.run(
            [str(OFFSETSTORE), "groups", "reset", group_id, "--topic", topic, "--shift-by", "-1000", "--execute",
             "--server", server.address],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert reset.returncode == 0, reset.stdout + reset.stderr
        assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, RECORDS - 1000)
        status, out = run_driver(*job[2:], "--until-caught-up", command=job[:2], env=env, cwd=tmp_path)
        assert status == 0 and "caught up" in out, out[-3000:]
        # The progress lines: 3000 records re-delivered (1000 per partition), none skipped.
        assert f"group {group_id} batch 0: {PER_TRIGGER} rows, {PER_TRIGGER} written, 0 skipped" in out, out[-3000:]
        assert rows() == (PARTITIONS * RECORDS, PARTITIONS * RECORDS)
        assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, RECORDS)
        with engine.connect() as conn:
            found = conn.exec_driver_sql(f'SELECT topic, "partition", "offset" FROM {table}').all()
        assert {tuple(r) for r in found} == records(topic, PARTITIONS, RECORDS)
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_a_fenced_run_of_the_example_ends_in_one_line_and_exit_code_3(
    jdk, database_url, engine, server, group_id, topic, tmp_path, busy: bool
):
    # Busy: the reset lands while batches run, and the next one is refused (StaleGenerationError
    # inside Spark's exception, py4j's and Spark's own logs). Idle: the sink's watch stops the query.
    table = f"public.orders_{uuid.uuid4().hex[:10]}"
    records = 1_000_000 if busy else 300
    job = [
        sys.executable, str(JOB), "--database-url", database_url, "--group", group_id, "--topic", topic,
        "--table", table, "--records", str(records), "--max-offsets-per-trigger", "300",
        "--checkpoint-base", str(tmp_path / "checkpoints"),
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    log = tmp_path / "job.log"
    try:
        with log.open("w") as out:
            running = subprocess.Popen(job, env=env, cwd=tmp_path, start_new_session=True, stdout=out, stderr=out)
        try:
            if busy:
                wait_for(lambda: stored_offsets(engine, group_id), what="a first batch")
            else:
                wait_for(lambda: stored_offsets(engine, group_id) == at_end(topic, 3, records), what="the end")
            reset = subprocess.run(
                [str(OFFSETSTORE), "groups", "reset", group_id, "--all-topics", "--to-earliest", "--execute",
                 "--server", server.address],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert reset.returncode == 0, reset.stdout + reset.stderr
            code = running.wait(timeout=180)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.pid, signal.SIGKILL)
        output = log.read_text()
        # The JVM logs from threads of its own: its lines may come after ours.
        said = [line for line in output.splitlines() if line.startswith(("fenced: ", "stopped: "))]
        assert code == 3, output[-3000:]
        assert len(said) == 1 and said[0].startswith("fenced: " if busy else "stopped: "), output[-3000:]
        assert f"group {group_id} moved on" in said[0]
        assert "Traceback" not in output and "\tat org.apache" not in output, output[-3000:]
        assert "caught up" not in output
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
