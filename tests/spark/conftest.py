"""Fixtures of the Spark tests: one local SparkSession per test session, sink tables, and query helpers."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from exactly_once import assert_exactly_once

from offsetstore.sink.sql import TableName, staging_name
from offsetstore.spark_integration import ExactlyOnceSink

# Spark's Python workers must run this interpreter (the one with the package and
# pyarrow); the loopback address keeps the driver off the machine's other interfaces.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: Master of every Spark in the tests: two cores, and up to 4 attempts per task, so
#: that a failed task is retried as on a cluster (local mode retries none by default).
MASTER = "local[2,4]"

#: A cluster on one machine: a master and two workers in the driver's JVM, each worker
#: launching an executor JVM of one core and 1 GiB, whose Python workers run in
#: processes of their own. What a real cluster does to the sink (pickling it to another
#: process, importing the package there, losing an executor), short of other hosts.
LOCAL_CLUSTER = "local-cluster[2,1,1024]"

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}


def build_spark(app: str, workdir: Path, master: str | None = MASTER):
    """A SparkSession for tests, with the Kafka-shaped source registered and its files under ``workdir``.

    ``master=None`` leaves the master to ``spark-submit``.
    """
    from pyspark.sql import SparkSession

    from offsetstore.spark_integration.testing import KafkaShapedSource

    builder = SparkSession.builder.appName(app)
    if master is not None:
        builder = builder.master(master)
    # Under workdir, not /tmp: a driver the crash tests kill leaves its scratch files behind.
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    files = {
        "spark.sql.warehouse.dir": str(workdir / "warehouse"),
        "spark.local.dir": str(workdir / "local"),
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={workdir / 'tmp'}",
    }
    for key, value in {**SPARK_CONF, **files}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KafkaShapedSource)
    return session


#: The oldest Java that PySpark 4 runs on.
MIN_JAVA = 17


@functools.cache
def jdk_problem() -> str | None:
    """Why no SparkSession can start here (no Java, or one older than 17); None when one can."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java:
        return f"Spark needs a JDK {MIN_JAVA}+: no java on PATH and no JAVA_HOME"
    if not os.path.exists(java):
        return f"Spark needs a JDK {MIN_JAVA}+: JAVA_HOME={home} has no bin/java"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"Spark needs a JDK {MIN_JAVA}+: {java} -version failed ({error})"
    # `java -version` prints on stderr: 'openjdk version "17.0.15"' or, for Java 8, '"1.8.0_402"'.
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not found:
        return f"Spark needs a JDK {MIN_JAVA}+: cannot read the version of {java}"
    major = int(found[2]) if found[1] == "1" and found[2] else int(found[1])
    if major < MIN_JAVA:
        return f"Spark needs a JDK {MIN_JAVA}+, found Java {major} at {java}"
    return None


@pytest.fixture(scope="session")
def jdk() -> None:
    """Skips the test, saying why, when no JDK 17+ is found."""
    if problem := jdk_problem():
        pytest.skip(problem)


@pytest.fixture(scope="session")
def spark(jdk, tmp_path_factory: pytest.TempPathFactory):
    """The session's SparkSession (starting one takes seconds)."""
    session = build_spark("offsetstore-tests", tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


def spark_home() -> Path:
    """The pip-installed PySpark's SPARK_HOME (its bin/, sbin/ and jars/)."""
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture
def cluster_work_dirs() -> Iterator[None]:
    """Removes the application folders that local-cluster workers leave under SPARK_HOME/work.

    The workers of ``local-cluster`` put each application's executor folders (logs,
    unpacked archives) under ``$SPARK_HOME/work``, which here is inside the venv; no
    setting of the driver moves them.
    """
    work = spark_home() / "work"
    before = set(work.iterdir()) if work.exists() else set()
    yield
    if work.exists():
        for path in set(work.iterdir()) - before:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses: watermarks are per topic, shared by all groups."""
    return f"t-{uuid.uuid4().hex[:10]}"


KAFKA_TABLE = """
CREATE TABLE {table} (
    key bytea,
    value bytea,
    topic text NOT NULL,
    "partition" integer NOT NULL,
    "offset" bigint NOT NULL,
    "timestamp" timestamptz,
    "timestampType" integer{extra}
)
"""


@dataclass
class SinkTable:
    """A sink table with the Kafka source's columns, and readers of what it holds."""

    engine: sa.Engine
    name: TableName

    def __str__(self) -> str:
        return str(self.name)

    def coordinates(self) -> list[tuple[str, int, int]]:
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql(f'SELECT topic, "partition", "offset" FROM {self.name.regclass()}').all()
        return [tuple(r) for r in rows]

    def rows(self, columns: str = "*") -> list[sa.Row]:
        with self.engine.connect() as conn:
            return conn.exec_driver_sql(f"SELECT {columns} FROM {self.name.regclass()}").all()

    def assert_exactly_once(self, expected: set[tuple[str, int, int]]) -> None:
        """Every expected record is in the table once, and nothing else is."""
        assert_exactly_once(self.coordinates(), expected)


@pytest.fixture
def make_table(engine: sa.Engine) -> Iterator:
    """Creates sink tables with the Kafka columns (``unique=`` adds a unique key); drops them after."""
    made: list[TableName] = []

    def make(*, unique: str | None = None, extra: str = "") -> SinkTable:
        name = TableName("public", f"sink_{uuid.uuid4().hex[:10]}")
        if unique:
            extra += f", UNIQUE ({unique})"
        with engine.begin() as conn:
            conn.exec_driver_sql(KAFKA_TABLE.format(table=name.regclass(), extra=extra))
        made.append(name)
        return SinkTable(engine, name)

    yield make
    with engine.begin() as conn:
        for name in made:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name.regclass()}")
            # Staging tables are named after the table and a group; drop any by prefix.
            stages = conn.exec_driver_sql(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables "
                "WHERE schemaname = %(s)s AND starts_with(tablename, %(p)s)",
                {"s": name.schema, "p": name.name + "_offsetstore_stage_"},
            ).scalars()
            for stage in list(stages):
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {stage}")


def records(topic: str, partitions: int, end: int, start: int = 0) -> set[tuple[str, int, int]]:
    """The coordinates of offsets [start, end) of every partition of ``topic``."""
    return {(topic, p, o) for p in range(partitions) for o in range(start, end)}


def kafka_stream(spark, topic: str, *, partitions: int, records: int = 0, **options: object):
    """A streaming DataFrame of the Kafka-shaped source (options as the Kafka source names them)."""
    reader = (
        spark.readStream.format("kafka_shaped")
        .option("subscribe", topic)
        .option("partitions", partitions)
        .option("records", records)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(df, sink: ExactlyOnceSink, checkpoint: Path | str, *, timeout: float = 180):
    """Runs the query with ``availableNow`` to the end of the data; re-raises a query failure."""
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(timeout)
    finally:
        if query.isActive:
            query.stop()
    assert finished, f"query did not finish within {timeout} s"
    return query


def staging_rows(engine: sa.Engine, table: SinkTable, group_id: str) -> int | None:
    """Rows in the group's staging table of ``table``; None when it does not exist."""
    stage = staging_name(table.name, group_id)
    with engine.connect() as conn:
        if conn.exec_driver_sql("SELECT to_regclass(%(n)s)", {"n": stage.regclass()}).scalar() is None:
            return None
        return conn.exec_driver_sql(f"SELECT count(*) FROM {stage.regclass()}").scalar()


def wait_for(predicate, *, timeout: float = 180, what: str = "condition", query=None):
    """Polls ``predicate`` until it is true; fails after ``timeout`` s or when ``query`` died."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if query is not None and not query.isActive:
            raise AssertionError(f"query stopped while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def stored_offsets(engine: sa.Engine, group_id: str) -> dict[tuple[str, int], int]:
    """The group's stored offsets, read from the store's table."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            'SELECT topic, "partition", "offset" FROM offsetstore.offsets WHERE group_id = %(g)s', {"g": group_id}
        ).all()
    return {(t, p): o for t, p, o in rows}


def at_end(topic: str, partitions: int, end: int) -> dict[tuple[str, int], int]:
    return {(topic, p): end for p in range(partitions)}


DRIVER = Path(__file__).with_name("crash_driver.py")


def run_driver(
    *args: str, command: list[str] | None = None, env: dict | None = None, cwd: Path | None = None, timeout: float = 400
):
    """Runs ``crash_driver.py`` (or ``command`` + args) in a process group of its own; returns (status, output)."""
    proc = subprocess.Popen(
        [*(command or [sys.executable, str(DRIVER)]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the driver ran for more than {timeout} s:\n{out[-3000:]}") from None
    finally:
        # Whatever of the run's own process group is still on its way down (local-cluster's executors too).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out
