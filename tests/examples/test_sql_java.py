"""The SQL API's Java example (examples/sql/java, JDBC from Debian), compiled with javac and killed mid-way: every record once."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_db import stored_offsets

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sql" / "java" / "CsvConsumer.java"
JDBC = Path("/usr/share/java/postgresql.jar")
JAVAC = shutil.which("javac")
JAVA = shutil.which("java")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(JAVAC is None or JAVA is None, reason="no JDK (javac and java) is installed"),
    pytest.mark.skipif(not JDBC.is_file(), reason=f"{JDBC} is missing: apt-get install libpostgresql-jdbc-java"),
]

PARTITIONS = 3
RECORDS = 400  # per partition
KILLS = 4


@pytest.fixture(scope="module")
def classes(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not sa.make_url(database_url).host:
        # The embedded PostgreSQL listens on a Unix socket only, which JDBC cannot reach;
        # .ci/run runs this file against the machine's PostgreSQL as well.
        pytest.skip("JDBC needs a TCP connection: set OFFSETSTORE_TEST_DATABASE_URL to a PostgreSQL on a host")
    out = tmp_path_factory.mktemp("java")
    result = subprocess.run(
        [str(JAVAC), "-cp", str(JDBC), "-d", str(out), str(EXAMPLE)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture
def table(engine: sa.Engine) -> Iterator[str]:
    name = f"public.java_sink_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE {name} (topic text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL, '
            "value text, run bigint)"
        )
    yield name
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def kafka_shaped_input(path: Path) -> set[tuple[str, int, int]]:
    """A CSV of topic,partition,offset,value: each partition in offset order, the partitions interleaved."""
    lines = ["topic,partition,offset,value"]
    for offset in range(RECORDS):
        for p in range(PARTITIONS):
            lines.append(f"orders,{p},{offset},p{p}-o{offset}")
    path.write_text("\n".join(lines) + "\n")
    return {("orders", p, o) for p in range(PARTITIONS) for o in range(RECORDS)}


def command(classes: Path, database_url: str, group_id: str, table: str, source: Path, *args: str) -> list[str]:
    url = sa.make_url(database_url)
    return [
        str(JAVA), "-cp", f"{classes}:{JDBC}", "CsvConsumer",
        "--jdbc-url", f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database}",
        "--user", url.username or "postgres", "--password", url.password or "",
        "--group", group_id, "--table", table, "--input", str(source), *args,
    ]  # fmt: skip


def test_killed_mid_way_and_rerun_the_java_consumer_writes_every_record_once(
    classes: Path, database_url: str, engine: sa.Engine, group_id: str, table: str, tmp_path: Path
) -> None:
    expected = kafka_shaped_input(tmp_path / "records.csv")
    run = command(classes, database_url, group_id, table, tmp_path / "records.csv", "--batch", "30", "--hold-ms", "60")
    rng = random.Random()
    progress = []
    for _ in range(KILLS):
        proc = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for line in proc.stdout:
                if line.startswith("wrote"):
                    break
                assert not line.startswith("done"), "the input ended before a kill: make it longer"
            time.sleep(rng.uniform(0, 0.5))
        finally:
            proc.kill()
            proc.communicate()
        progress.append(sum(stored_offsets(engine, group_id).values()))
    assert all(a < b for a, b in zip([0, *progress], progress, strict=False)), progress
    assert progress[-1] < len(expected), "the input ended before the last kill: make it longer"

    finished = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert finished.stdout.splitlines()[-1] == "done"
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f'SELECT topic, "partition", "offset", value FROM {table}').all()
    assert_exactly_once([(t, p, o) for t, p, o, _ in rows], expected)
    assert all(v == f"p{p}-o{o}" for _, p, o, v in rows)
    assert stored_offsets(engine, group_id) == {("orders", p): RECORDS for p in range(PARTITIONS)}


def test_the_java_consumer_stops_on_os001_when_fenced(
    classes: Path, database_url: str, engine: sa.Engine, group_id: str, table: str, tmp_path: Path
) -> None:
    kafka_shaped_input(tmp_path / "records.csv")
    run = command(classes, database_url, group_id, table, tmp_path / "records.csv", "--batch", "30", "--hold-ms", "100")
    proc = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().startswith("joined")
        assert proc.stdout.readline().startswith("wrote")
        with engine.begin() as conn:
            current = conn.exec_driver_sql("SELECT offsetstore.join_group(%(g)s)", {"g": group_id}).scalar_one()
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 3, out
    assert out.splitlines()[-1] == f"fenced current generation {current}"
