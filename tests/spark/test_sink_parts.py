"""The Spark integration's parts that need no SparkSession: COPY encoding, starting offsets, checkpoints, pickling."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import subprocess
import sys
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from offsetstore import storage
from offsetstore.client import Boundary, OffsetCommit
from offsetstore.sink import arrow_copy as _arrow
from offsetstore.sink import sql as _sql
from offsetstore.sink.sql import TableName
from offsetstore.spark_integration import ExactlyOnceSink, checkpoint_location, starting_offsets
from tests.fixtures.fix_spark import jdk_problem

pytestmark = pytest.mark.spark


def test_importing_the_package_imports_neither_pyspark_nor_pyarrow():
    code = (
        "import sys, offsetstore.spark_integration as s; "
        "print(sorted(m for m in ('pyspark', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_copy_round_trips_awkward_values(engine: sa.Engine):
    name = TableName("public", f"copy_{uuid.uuid4().hex[:10]}")
    columns = {
        "key": "bytea",
        "select": "text",  # a reserved word
        "Mixed Case": "integer",
        "offset": "bigint",
        "partition": "integer",
        "ratio": "double precision",
        "amount": "numeric(10,3)",
        "at": "timestamptz",
        "day": "date",
        "ok": "boolean",
    }
    ddl = ", ".join(f'"{c}" {t}' for c, t in columns.items())
    utc = dt.UTC
    data = pa.table(
        {
            "key": pa.array([b"\x00\xff\"',\n\\", b"", None], pa.binary()),
            "select": pa.array(['a "quoted", multi\nline \\ value', "", None]),
            "Mixed Case": pa.array([1, None, -3], pa.int32()),
            "offset": pa.array([0, 2**62, 7], pa.int64()),
            "partition": pa.array([0, 1, 2], pa.int32()),
            "ratio": pa.array([1.5, float("inf"), float("nan")]),
            "amount": pa.array([Decimal("1.250"), Decimal("-0.001"), None], pa.decimal128(10, 3)),
            "at": pa.array(
                [dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=utc), None, dt.datetime(1999, 12, 31, tzinfo=utc)],
                pa.timestamp("us", tz="UTC"),
            ),
            "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1970, 1, 1)]),
            "ok": pa.array([True, False, None]),
        }
    )
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {name.regclass()} ({ddl})")
        try:
            with conn.connection.driver_connection.cursor() as cur:
                written = _arrow.copy_batches(
                    cur, _sql.copy_into(name, list(columns)), data.to_batches(max_chunksize=2)
                )
                cur.execute(f'SELECT * FROM {name.regclass()} ORDER BY "partition"')
                rows = cur.fetchall()
        finally:
            conn.exec_driver_sql(f"DROP TABLE {name.regclass()}")
    assert written == 3
    first, second, third = rows
    assert first[:5] == (b"\x00\xff\"',\n\\", 'a "quoted", multi\nline \\ value', 1, 0, 0)
    assert first[5:] == (
        1.5,
        Decimal("1.250"),
        dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=utc),
        dt.date(2024, 2, 29),
        True,
    )
    # The empty string and empty bytes stay apart from NULL.
    assert second[:4] == (b"", "", None, 2**62) and second[5] == float("inf") and second[8:] == (None, False)
    assert third[:3] == (None, None, -3) and third[5] != third[5]  # NaN
    assert third[6:] == (None, dt.datetime(1999, 12, 31, tzinfo=utc), dt.date(1970, 1, 1), None)


def test_copy_refuses_nested_values_with_a_reason():
    batch = pa.record_batch({"tags": pa.array([["a"]])})
    with pytest.raises(TypeError, match="to_json"):
        _arrow._encodable(batch)


def test_skip_rule_keeps_rows_at_or_above_the_stored_offset_and_ignores_sentinels():
    table = pa.table(
        {
            "topic": ["a"] * 4 + ["b"] * 2 + ["c"] * 2,
            "partition": pa.array([0, 0, 1, 1, 0, 0, 0, 0], pa.int32()),
            "offset": pa.array([5, 6, 5, 6, 1, 2, 8, 9], pa.int64()),
        }
    )
    stats = _arrow.partition_stats(table)
    stored = {("a", 0): 6, ("a", 1): 100, ("b", 0): -2, ("c", 0): -1}
    kept = _arrow.skip_delivered(table, stats, stored)
    assert sorted(
        zip(kept["topic"].to_pylist(), kept["partition"].to_pylist(), kept["offset"].to_pylist(), strict=True)
    ) == [
        ("a", 0, 6),
        ("b", 0, 1),
        ("b", 0, 2),
        ("c", 0, 8),
        ("c", 0, 9),
    ]
    assert _arrow.skip_delivered(table, stats, {("a", 0): 5}) is table


def test_starting_offsets_lists_every_partition(database_url: str, engine: sa.Engine, client, group_id: str):
    topic, reset = f"t-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        storage.commit_offsets(
            conn,
            group_id,
            [
                OffsetCommit(topic, 0, 42),
                OffsetCommit(topic, 2, 7),
                OffsetCommit(topic, 9, 1),
                OffsetCommit(reset, 0, 5),
            ],
        )
    # A reset to "latest" with no watermark known stores the sentinel -1.
    with engine.begin() as conn:
        storage.reset_offsets(conn, group_id, {reset: []}, to_boundary=Boundary.LATEST)
    expected = {topic: {"0": 42, "1": -2, "2": 7, "3": -2}, reset: {"0": -1}, "other": {"0": -2}}
    for source in (database_url, engine, client):
        assert json.loads(starting_offsets(source, group_id, {topic: 4, reset: 1, "other": 1})) == expected
    assert json.loads(starting_offsets(database_url, "never-seen-" + group_id, {topic: 2})) == {
        topic: {"0": -2, "1": -2}
    }
    with pytest.raises(ValueError):
        starting_offsets(database_url, group_id, {topic: 0})


def test_checkpoint_location_moves_on_with_each_reset(database_url: str, engine: sa.Engine, group_id: str):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    base = "s3a://bucket/checkpoints/"
    gid = group_id + "/with slash"
    first = checkpoint_location(database_url, gid, base)
    assert first == f"s3a://bucket/checkpoints/{group_id}%2Fwith%20slash/reset-0"
    with engine.begin() as conn:
        storage.commit_offsets(conn, gid, [OffsetCommit(topic, 0, 10)])
        storage.join_group(conn, gid)  # a new run is not a reset: same checkpoint
    assert checkpoint_location(database_url, gid, base) == first
    with engine.begin() as conn:
        storage.reset_offsets(conn, gid, {topic: []}, to_offset=3)
    assert checkpoint_location(engine, gid, base).endswith("/reset-1")


def test_checkpoint_location_over_grpc(client, engine: sa.Engine, group_id: str):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    assert checkpoint_location(client, group_id, "/cp") == f"/cp/{group_id}/reset-0"  # unknown group
    client.commit_offsets(group_id, {(topic, 0): 10})
    client.reset_offsets(group_id, topics={topic: []}, to_offset=3)
    client.reset_offsets(group_id, topics={topic: []}, to_offset=4)
    assert client.describe_group(group_id).reset_count == 2
    assert checkpoint_location(client, group_id, "/cp") == f"/cp/{group_id}/reset-2"
    with engine.begin() as conn:
        assert (
            checkpoint_location(engine, group_id, "/cp")
            == f"/cp/{group_id}/reset-{storage.reset_count(conn, group_id)}"
        )


def test_sink_pickles_without_its_connections(database_url: str):
    sink = ExactlyOnceSink(
        database_url,
        group_id="g",
        table=("my.schema", "my.table"),
        mode="upsert",
        key_columns=["id"],
        statement_timeout_ms=1234,
        registry=CollectorRegistry(),
    )
    sink._get_engine()
    clone = pickle.loads(pickle.dumps(sink))
    assert clone._engine is None and clone.generation is None and clone._registry is None
    assert clone.statement_timeout_ms == 1234
    assert (clone.table, clone.key_columns, clone.mode) == (TableName("my.schema", "my.table"), ("id",), "upsert")
    assert "password" not in repr(clone) and database_url not in repr(clone)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "merge"}, "mode"),
        ({"mode": "upsert"}, "key_columns"),
        ({"key_columns": ["id"]}, "only for mode='upsert'"),
        ({"mode": "upsert", "key_columns": ["id"], "columns": ["x"]}, "not among the written columns"),
        ({"write_path": "both"}, "write_path"),
        ({"columns": "offset"}, "not a string"),
        ({"columns": ["a", "a"]}, "twice"),
        ({"statement_timeout_ms": -1}, "timeouts must be >= 0"),
        ({"executor_threshold": -1}, "executor_threshold"),
    ],
)
def test_sink_refuses_inconsistent_options(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ExactlyOnceSink("postgresql://localhost/db", "g", "t", **kwargs)


def test_table_names_parse_and_quote():
    assert TableName.parse("orders").ident().as_string(None) == '"orders"'
    assert TableName.parse("public.orders").ident().as_string(None) == '"public"."orders"'
    assert TableName.parse(("a.b", 'c"d')).ident().as_string(None) == '"a.b"."c""d"'
    with pytest.raises(ValueError):
        TableName.parse("a.b.c")
    stage = _sql.staging_name(TableName("s", "x" * 63), "group")
    assert len(stage.name.encode()) <= 63 and stage.schema == "s"
    assert stage != _sql.staging_name(TableName("s", "x" * 63), "other group")


@pytest.mark.parametrize(
    ("printed", "reason"),
    [
        ('openjdk version "11.0.22" 2024-01-16', "found Java 11"),
        ('java version "1.8.0_402"', "found Java 8"),
        ("no version here", "cannot read the version"),
        ('openjdk version "17.0.15" 2025-04-15', None),
        ('openjdk version "21" 2023-09-19', None),
    ],
)
def test_spark_tests_name_the_missing_jdk(tmp_path, monkeypatch, printed, reason):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"#!/bin/sh\necho '{printed}' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    problem = jdk_problem.__wrapped__()
    if reason is None:
        assert problem is None
    else:
        assert reason in problem and "17+" in problem


def test_spark_tests_say_when_there_is_no_java(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert f"JAVA_HOME={tmp_path} has no bin/java" in jdk_problem.__wrapped__()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "no java on PATH and no JAVA_HOME" in jdk_problem.__wrapped__()


def test_a_batch_is_fingerprinted_by_its_row_at_each_partitions_highest_offset():
    from offsetstore.core.types import RecordFingerprint, TopicPartition
    from offsetstore.sink.fingerprints import digest
    from offsetstore.spark_integration import _fingerprints

    at = dt.datetime(2026, 12, 7, 21, 0, tzinfo=dt.UTC)
    rows = [  # (partition, offset, key, value, ms after `at`, headers), out of order as a batch may be
        (1, 7, b"k7", b"v7", 3, [{"key": "writer", "value": b"r1"}]),
        (0, 4, None, b"v4", 1, []),
        (1, 9, b"k9", b"v9", 5, [{"key": "writer", "value": b"r1"}, {"key": "n", "value": None}]),
        (0, 3, b"k3", b"v3", 0, []),
    ]
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.table(
        {
            "key": pa.array([r[2] for r in rows], pa.binary()),
            "value": pa.array([r[3] for r in rows], pa.binary()),
            "topic": pa.array(["t"] * len(rows)),
            "partition": pa.array([r[0] for r in rows], pa.int32()),
            "offset": pa.array([r[1] for r in rows], pa.int64()),
            "timestamp": pa.array([at + dt.timedelta(milliseconds=r[4]) for r in rows], pa.timestamp("us", "UTC")),
            "headers": pa.array([r[5] for r in rows], headers_type),
        }
    )
    ms = int(at.timestamp() * 1000)
    expected = {
        TopicPartition("t", 0): RecordFingerprint(5, ms + 1, digest(None, b"v4", [])),
        TopicPartition("t", 1): RecordFingerprint(10, ms + 5, digest(b"k9", b"v9", [("writer", b"r1"), ("n", None)])),
    }
    assert _fingerprints.from_arrow(batch) == expected
    # A committed offset the batch did not move (a replay) keeps the fingerprint stored with it.
    assert _fingerprints.committed_only(expected, {TopicPartition("t", 1): 10}) == {
        TopicPartition("t", 1): expected[TopicPartition("t", 1)]
    }
    # A batch whose value is no longer Kafka's bytes, or that lost its timestamp, is not fingerprinted.
    assert _fingerprints.from_arrow(batch.set_column(1, "value", pa.array(["x"] * len(rows)))) is None
    assert _fingerprints.from_arrow(batch.drop_columns(["timestamp"])) is None
