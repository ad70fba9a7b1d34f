"""Issue 49's takeover of a Spark job: a legacy at-least-once foreachBatch job whose driver is killed between its write
and Spark's commit, ``groups adopt --from-spark-checkpoint`` on the checkpoint Spark wrote, the exactly-once sink on the same table.
Both jobs read the topic with Spark's own Kafka source (``format("kafka")``) from the session's Apache Kafka broker.

Starting the successor at ``earliest`` (an overlap) or ``latest`` (a gap) instead is caught by the same check.
The legacy job runs once per module; each case writes into a copy of what it left.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.cli._spark_checkpoint import read_checkpoint
from tests.fixtures.doc_snippets import snippets
from tests.fixtures.fix_spark import records, run_driver
from tests.fixtures.fix_spark_kafka import make_topic, produce
from tests.fixtures.takeover import check_takeover

# A Spark driver of its own for the legacy job, then three successors: minutes on a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1500)]

PARTITIONS = 3
END = 300
#: One batch's records at most: the legacy job's own duplicates are bounded by it.
PER_BATCH = 100
#: The batch in which the legacy driver dies, after its rows are written and before Spark commits it.
DIES_IN = 2

TABLE = """
CREATE TABLE {table} (
    key bytea, value bytea, topic text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL,
    "timestamp" timestamptz, "timestampType" integer,
    writer text NOT NULL DEFAULT 'offsetstore'
)
"""


ADOPT_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adopt.md"
LEGACY = Path(__file__).with_name("legacy_driver.py")
GUIDE_DRIVER = Path(__file__).with_name("adopt_guide_driver.py")

#: The drivers' environment: a Python worker may take its time to connect back to the JVM on a
#: loaded machine (Spark's default wait is 15 s; under a load of 20 the data source's planner
#: missed it and the query failed before its first batch).
DRIVER_ENV = {
    **os.environ,
    "PYSPARK_SUBMIT_ARGS": "--conf spark.python.authenticate.socketTimeout=180s pyspark-shell",
}


@pytest.fixture(scope="module")
def broker(kafka_connector_jars, kafka_broker):
    """The session's Apache Kafka broker, which both jobs read with Spark's own Kafka source."""
    return kafka_broker


@pytest.fixture(scope="module")
def legacy(jdk, engine, broker, tmp_path_factory):
    """(topic, the table the legacy job left, its checkpoint): the job's driver was killed in batch DIES_IN."""
    topic = f"adopt-{uuid.uuid4().hex[:10]}"
    make_topic(broker, topic, PARTITIONS)
    produce(broker, topic, PARTITIONS, 0, END)  # the records KafkaShapedSource makes up, which `records` expects
    table = f"public.legacy_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(TABLE.format(table=table))
    work = tmp_path_factory.mktemp("legacy")
    libpq_url = engine.url.render_as_string(hide_password=False).replace("postgresql+psycopg://", "postgresql://")
    status, out = run_driver(
        *("--libpq-url", libpq_url, "--table", table, "--topic", topic, "--checkpoint", str(work / "checkpoint")),
        *("--workdir", str(work / "spark"), "--partitions", str(PARTITIONS), "--records", str(END)),
        *("--max-offsets-per-trigger", str(PER_BATCH), "--dies-in", str(DIES_IN), "--bootstrap", broker.bootstrap),
        command=[sys.executable, str(LEGACY)],
        env=DRIVER_ENV,
        timeout=1200,
    )
    assert status == -signal.SIGKILL, out[-3000:]
    assert f"wrote batch {DIES_IN}" in out, out[-3000:]
    yield topic, table, work / "checkpoint"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


@pytest.fixture
def takeover_table(engine, legacy):
    """A copy of the legacy job's table, for one successor to write into."""
    _, table, _ = legacy
    copy = f"public.takeover_{uuid.uuid4().hex[:10]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {copy} (LIKE {table} INCLUDING DEFAULTS)")
        conn.exec_driver_sql(f"INSERT INTO {copy} SELECT * FROM {table}")
    yield copy
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {copy}")


def rows_of(engine: sa.Engine, table: str) -> list[tuple[str, int, int, int]]:
    with engine.connect() as conn:
        found = conn.exec_driver_sql(f'SELECT topic, "partition", "offset", writer FROM {table}').all()
    return [(t, p, o, 0 if writer == "legacy" else 1) for t, p, o, writer in found]


def successor(database_url: str, group_id: str, topic: str, table: str, start: str, work: Path, bootstrap: str) -> None:
    """The offsetstore job, in a driver of its own as the legacy one ran: the exactly-once sink on the same table.

    ``start``: ``store`` (startingOffsets from the store, as docs/adopt.md says), or a
    startingOffsets as given (``earliest``, ``latest``).
    """
    status, out = run_driver(
        *("--database-url", database_url, "--group-id", group_id, "--table", table, "--topic", topic),
        *("--partitions", str(PARTITIONS), "--records", str(END), "--max-offsets-per-trigger", str(PER_BATCH)),
        *("--checkpoint", str(work / "checkpoint"), "--workdir", str(work / "spark"), "--write-path", "driver"),
        *("--bootstrap", bootstrap),
        *(("--from-store",) if start == "store" else ("--starting-offsets", start)),
        env=DRIVER_ENV,
        timeout=1200,
    )
    assert status == 0 and "finished" in out, out[-3000:]


def guide_successor(database_url: str, group_id: str, topic: str, table: str, work: Path, bootstrap: str) -> None:
    """docs/adopt.md's offsetstore job as printed (``adopt_guide_driver.py``), in a driver of its own."""
    status, out = run_driver(
        *("--database-url", database_url, "--group-id", group_id, "--table", table, "--topic", topic),
        *("--partitions", str(PARTITIONS), "--bootstrap", bootstrap),
        *("--checkpoint", str(work / "checkpoint"), "--workdir", str(work / "spark")),
        command=[sys.executable, str(GUIDE_DRIVER)],
        env=DRIVER_ENV,
        timeout=1200,
    )
    assert status == 0 and "finished" in out, out[-3000:]


def test_adopting_a_spark_checkpoint_hands_over_exactly_once(
    database_url, engine, group_id, groups, broker, legacy, takeover_table, tmp_path
) -> None:
    """The successor is docs/adopt.md's own job, as printed (its broker, names and checkpoint the test's)."""
    topic, _, checkpoint = legacy
    found = read_checkpoint(str(checkpoint))
    assert (found.batch, found.in_flight) == (DIES_IN - 1, DIES_IN)

    adopted = groups("adopt", group_id, "--from-spark-checkpoint", str(checkpoint), "--execute")
    assert adopted.code == 0, adopted.err
    assert f"batch {DIES_IN} was planned but not committed" in adopted.err
    guide_successor(database_url, group_id, topic, takeover_table, tmp_path, broker.bootstrap)

    handed_over = {(tp.topic, tp.partition): offset for tp, offset in found.offsets.items()}
    takeover = check_takeover(rows_of(engine, takeover_table), records(topic, PARTITIONS, END), handed_over, PER_BATCH)
    # The batch the legacy driver died in was written and never committed: the successor writes it again.
    assert 0 < takeover.duplicates <= PER_BATCH
    # The counts the closing note gives (capsys holds sys.stdout for the CLI's output).
    print(f"adoption takeover (Spark checkpoint): {takeover}, handed over {handed_over}", file=sys.__stderr__)


@pytest.mark.parametrize(("start", "caught"), [("earliest", "an overlap"), ("latest", "a gap")])
def test_starting_at_earliest_or_latest_instead_is_caught_by_the_same_check(
    database_url, engine, group_id, broker, legacy, takeover_table, tmp_path, start: str, caught: str
) -> None:
    topic, _, checkpoint = legacy
    found = read_checkpoint(str(checkpoint))
    successor(database_url, group_id, topic, takeover_table, start, tmp_path, broker.bootstrap)

    handed_over = {(tp.topic, tp.partition): offset for tp, offset in found.offsets.items()}
    with pytest.raises(AssertionError, match=caught):
        check_takeover(rows_of(engine, takeover_table), records(topic, PARTITIONS, END), handed_over, PER_BATCH)


def test_the_checkpoint_spark_wrote_is_the_format_the_parser_reads(legacy) -> None:
    """The offsets/ entry of the batch adopted, as Spark wrote it: a version line, metadata, one JSON line per source."""
    topic, _, checkpoint = legacy
    lines = (checkpoint / "offsets" / str(DIES_IN - 1)).read_text().splitlines()
    assert lines[0] == "v1"
    assert "batchTimestampMs" in json.loads(lines[1])
    assert set(json.loads(lines[2])) == {topic}
    # docs/adopt.md's sample entry has the same shape: version, metadata keys Spark writes, {topic: {"p": offset}}.
    (sample,) = [s for s in snippets(ADOPT_GUIDE, "text") if s.startswith("v1\n")]
    doc = sample.splitlines()
    assert len(doc) == len(lines) and doc[0] == lines[0]
    assert set(json.loads(doc[1])) <= set(json.loads(lines[1]))
    written = json.loads(lines[2])[topic]
    assert all(p.isdigit() and type(o) is int for p, o in [*written.items(), *json.loads(doc[2])["orders"].items()])
    assert (checkpoint / "commits" / str(DIES_IN - 1)).read_text().splitlines() == ["v1", '{"nextBatchWatermarkMs":0}']
