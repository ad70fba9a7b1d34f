"""The sink on a cluster of processes: executor JVMs of their own (local-cluster), one of them killed mid-COPY,
and Python workers that cannot import the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import DRIVER, LOCAL_CLUSTER, at_end, records, run_driver, spark_home

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS, RECORDS, PER_TRIGGER = 3, 400, 600


def _common(database_url: str, group_id: str, table, topic: str, tmp_path: Path) -> list[str]:
    return [
        "--database-url", database_url,
        "--group-id", group_id,
        "--table", str(table),
        "--topic", topic,
        "--partitions", str(PARTITIONS),
        "--records", str(RECORDS),
        "--max-offsets-per-trigger", str(PER_TRIGGER),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--workdir", str(tmp_path / "spark"),
    ]  # fmt: skip


def test_an_executor_killed_mid_copy_is_retried_and_nothing_is_duplicated_or_lost(
    jdk, database_url, engine, group_id, topic, make_table, tmp_path, cluster_work_dirs
):
    table = make_table()
    markers = tmp_path / "markers"
    markers.mkdir()

    # The first staging task to have sent its rows (its COPY's transaction still open)
    # kills its executor JVM and itself; Spark runs the task again on the other executor.
    status, out = run_driver(
        *_common(database_url, group_id, table, topic, tmp_path),
        "--master", LOCAL_CLUSTER,
        "--write-path", "executors",
        "--kill-executor-at", "task_copied",
        "--marker-dir", str(markers),
    )  # fmt: skip

    assert status == 0 and "finished" in out, out[-3000:]
    assert (markers / "killed").exists(), "no executor was killed: the test proved nothing"
    table.assert_exactly_once(records(topic, PARTITIONS, RECORDS))
    assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, RECORDS)


def _interpreter_without_offsetstore() -> str:
    """This venv's base interpreter: the same Python, without the venv's packages."""
    base = Path(sys.base_prefix, "bin", "python3")
    found = subprocess.run([str(base), "-c", "import offsetstore"], capture_output=True, check=False)
    assert found.returncode != 0, f"{base} imports offsetstore: the test needs an interpreter without it"
    return str(base)


def test_workers_without_the_package_fail_the_first_batch_in_one_line_before_joining(
    jdk, database_url, engine, client, group_id, topic, make_table, tmp_path
):
    table = make_table()
    # As a newcomer's job runs when the venv is not activated: the workers get another python3.
    env = {**os.environ, "PYSPARK_PYTHON": _interpreter_without_offsetstore()}

    # Spark's JVM rate source: nothing but the sink runs Python on the workers.
    status, out = run_driver(
        *_common(database_url, group_id, table, topic, tmp_path),
        "--master", "local[1]",
        "--write-path", "auto",
        "--source", "rate",
        env=env,
    )  # fmt: skip

    assert status != 0, out[-3000:]
    lines = [
        line
        for line in out.splitlines()
        if line.startswith("Spark's Python workers cannot import offsetstore.spark_integration")
    ]
    assert lines, out[-5000:]
    assert "No module named 'offsetstore'" in lines[0] and "set PYSPARK_PYTHON" in lines[0], lines[0]
    assert table.coordinates() == []
    assert stored_offsets(engine, group_id) == {}
    assert client.fetch_offsets(group_id).generation == 0, "a run that cannot write joined the group"


ROOT = Path(__file__).parents[2]


def _run(*command: str | Path, cwd: Path | None = None) -> None:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{command[:3]}... failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_the_documented_packed_environment_recipe_runs_the_executors_path_under_spark_submit(
    jdk, database_url, engine, group_id, topic, make_table, tmp_path, cluster_work_dirs
):
    # docs/spark.md, "Running on a cluster": a wheel, a venv with it and its sink extra (psycopg,
    # SQLAlchemy, pyarrow, numpy; no PySpark: Spark ships its own to the workers), packed by venv-pack.
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", ROOT)
    (wheel,) = (tmp_path / "dist").glob("offsetstore-*.whl")
    env = tmp_path / "env"
    _run(Path(sys.base_prefix, "bin", "python3"), "-m", "venv", env)
    _run(env / "bin" / "python", "-m", "pip", "install", "--quiet", f"{wheel}[sink]")
    _run(Path(sys.executable).with_name("venv-pack"), "-p", env, "-o", tmp_path / "env.tar.gz", "-q")
    table = make_table()
    per_batch, batches = 3000, 3

    # The driver runs this venv's Python (client mode); the executors unpack the
    # archive in their working directories and run ./env/bin/python from it.
    submit_env = {
        **os.environ,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYSPARK_PYTHON": "./env/bin/python",
    }
    status, out = run_driver(
        "--master", LOCAL_CLUSTER,
        "--archives", f"{tmp_path / 'env.tar.gz'}#env",
        DRIVER,
        *_common(database_url, group_id, table, topic, tmp_path),
        "--max-offsets-per-trigger", str(per_batch),  # argparse: the last one wins
        "--master", "submit",
        "--source", "rate",
        "--write-path", "executors",
        "--batches", str(batches),
        command=[str(spark_home() / "bin" / "spark-submit")],
        env=submit_env,
    )  # fmt: skip

    # ./env/bin/python exists only in the unpacked archive: the executors' path (and the
    # sink's check of the workers before it) ran in the packed environment.
    assert status == 0 and "committed batches" in out, out[-5000:]
    assert "executors path" in out, "no batch took the executors' path"
    stored = stored_offsets(engine, group_id)
    assert min(stored.values()) >= batches * per_batch // PARTITIONS
    table.assert_exactly_once({(t, p, o) for (t, p), end in stored.items() for o in range(end)})
