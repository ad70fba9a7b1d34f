"""The Flink sink and offsets initializer at a job's start (issue 58): the group bound to the job's Kafka cluster,
a group bound to another refused by both, naming both ids, with nothing joined.

No job runs: tests/flink/java/BindingCheck calls the initializer and the sink's ``build()`` as a job's
start does, against a real broker and the database (tests/flink/test_switch_mirror_maker.py runs them in jobs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import OffsetCommit
from offsetstore.flink_integration import compile_java, flink_classpath, sink_classpath
from offsetstore.kafka_integration.local_kafka import KafkaCluster
from offsetstore.kafka_integration.maven import MissingPiece
from offsetstore.storage.clusters import bind_cluster, bound_cluster

pytestmark = [pytest.mark.flink, pytest.mark.kafka]

CHECK = Path(__file__).resolve().parent / "java" / "BindingCheck.java"


def _check(database_url: str, group: str, broker: KafkaCluster, topic: str) -> list[str]:
    url = sa.make_url(database_url)
    if not url.host:
        pytest.skip("JDBC needs a TCP connection: set OFFSETSTORE_TEST_DATABASE_URL to a PostgreSQL on a host")
    try:
        jars = flink_classpath(jdbc_connector=False)
        sink = sink_classpath()
        classes = compile_java([CHECK], [*jars, str(sink)], name="flink-binding-check")
    except MissingPiece as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Flink here: {e}")
    jdbc = f"jdbc:postgresql://{url.host}:{url.port or 5432}/{url.database}"
    done = subprocess.run(
        [
            shutil.which("java") or "java",
            "-cp",
            os.pathsep.join([str(classes), str(sink), *jars]),
            "BindingCheck",
            jdbc,
            url.username or "postgres",
            group,
            broker.bootstrap,
            topic,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("initializer", "sink"))]
    assert len(lines) == 2, done.stdout + done.stderr
    return lines


def test_an_unbound_group_is_bound_to_the_jobs_cluster_and_another_is_refused_by_both(
    kafka_broker: KafkaCluster, engine: sa.Engine, database_url: str, group_id: str
) -> None:
    with engine.begin() as conn:  # an older group: positions, no cluster
        generation = storage.join_group(conn, group_id)
        storage.commit_offsets(conn, group_id, [OffsetCommit("orders", 0, 42)], generation=generation)
    initializer, sink = _check(database_url, group_id, kafka_broker, "orders")
    assert initializer == "initializer: 42"
    assert sink == f"sink: joined {generation + 1} bound to {_bound(engine, group_id)}"
    cluster = _bound(engine, group_id)
    assert cluster

    other = f"{group_id}-other"
    with engine.begin() as conn:
        generation = storage.join_group(conn, other)
        storage.commit_offsets(conn, other, [OffsetCommit("orders", 0, 7)], generation=generation)
        bind_cluster(conn, other, "cluster-elsewhere")
    initializer, sink = _check(database_url, other, kafka_broker, "orders")
    assert initializer == (
        f"initializer refused: offsetstore: group {other} is bound to Kafka cluster cluster-elsewhere, and this "
        f"source reads cluster {cluster}: not started. Move the group with `offsetstore groups switch {other} "
        "--to-bootstrap-server ...`, or read the cluster it is bound to"
    )
    assert sink == (
        f"sink refused: offsetstore: could not join group {other} (SQLSTATE OS006: ERROR: group {other} is bound to Kafka "
        f"cluster cluster-elsewhere, and this consumer reads cluster {cluster}: nothing was written)"
    )
    with engine.connect() as conn:  # nothing joined: the refused bind rolled the join back
        assert storage.describe_group(conn, other).generation == generation
        assert bound_cluster(conn, other) == "cluster-elsewhere"


def _bound(engine: sa.Engine, group: str) -> str | None:
    with engine.connect() as conn:
        return bound_cluster(conn, group)
