"""The writers that commit in their own transactions — the Kafka writer and the SQL API — through PgBouncer in both pool modes.

Behind the pooler is the same primary as for the server, whose default ``synchronous_commit``
is off: a writer's commit must still wait for the synchronous standby, which the test sees as
a backend waiting on ``SyncRep`` while the standby is stalled.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import psycopg
import pytest

from offsetstore.kafka_integration import ExactlyOnceWriter
from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_pg_cluster import PgCluster, wait_for
from tests.fixtures.fix_pgbouncer import PgBouncer

COLUMNS = ("topic", "partition", "offset", "value")


def sql_api_commit(url: str, group: str, offset: int) -> None:
    """docs/sql.md's loop from plain psycopg: join, begin the write, commit the offsets, COMMIT.

    No server-side prepared statements: PgBouncer 1.18 in transaction mode does not keep them.
    """
    with psycopg.connect(url, prepare_threshold=None) as conn:
        generation = conn.execute("SELECT offsetstore.join_group(%s)", (group,)).fetchone()[0]
        conn.commit()
        conn.execute("SELECT * FROM offsetstore.begin_write(%s, %s)", (group, generation)).fetchall()
        conn.execute(
            "SELECT * FROM offsetstore.commit_offsets(%s, %s, %s, %s, %s)",
            (group, generation, ["orders"], [0], [offset]),
        ).fetchall()
        conn.commit()


def stored(cluster: PgCluster, group: str) -> dict[int, int]:
    with cluster.primary.connect() as conn:
        rows = conn.execute(
            'SELECT "partition", "offset" FROM offsetstore.offsets WHERE group_id = %s', (group,)
        ).fetchall()
    return dict(rows)


def test_the_sql_api_loop_through_the_pooler(pooler: PgBouncer, pooled_server, pooled_cluster: PgCluster) -> None:
    group = f"sql-{uuid.uuid4().hex[:8]}"
    for offset in range(1, 21):  # more than psycopg's prepare threshold, which is off here
        sql_api_commit(pooler.url(), group, offset)
    assert stored(pooled_cluster, group) == {0: 20}


def test_the_kafka_writer_through_the_pooler_writes_each_record_once(
    pooler: PgBouncer, pooled_server, pooled_cluster: PgCluster, broker, make_topic
) -> None:
    pytest.importorskip("confluent_kafka", reason="the kafka extra (confluent-kafka) is not installed")
    from tests.fixtures.fix_kafka import read_all

    topic = make_topic(partitions=2, records=60)
    messages = read_all(broker, topic, expected=120)
    table = f"public.pooled_{uuid.uuid4().hex[:8]}"
    pooled_cluster.primary.query(
        f'CREATE TABLE {table} (topic text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL, value text)'
    )
    group = f"kafka-{uuid.uuid4().hex[:8]}"
    with ExactlyOnceWriter(pooler.url(), group, table, columns=COLUMNS) as writer:

        def write(batch: list) -> None:
            writer.write(batch, [{"value": m.value().decode()} for m in batch])

        for start in range(0, 110, 10):
            write(messages[start : start + 10])
        # The writer's own transaction asks for synchronous_commit, whatever the database's default.
        assert_waits_for_the_standby(pooled_cluster, lambda: write(messages[110:]))
        # A redelivery of everything: nothing lands twice.
        outcome = writer.write(messages, [{"value": m.value().decode()} for m in messages])
        assert (outcome.written, outcome.skipped) == (0, 120)
    with pooled_cluster.primary.connect() as conn:
        found = conn.execute(f'SELECT topic, "partition", "offset" FROM {table}').fetchall()
    assert_exactly_once([tuple(r) for r in found], topic.coordinates())
    assert stored(pooled_cluster, group) == {0: 60, 1: 60}


def sync_waits(cluster: PgCluster) -> int:
    """Backends of the primary whose COMMIT waits for the synchronous standby."""
    return cluster.primary.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", "postgres")


def assert_waits_for_the_standby(cluster: PgCluster, commit: Callable[[], None]) -> None:
    """``commit`` runs while the standby is stalled: it must wait on SyncRep, then finish once the standby is back."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            commit()
        except BaseException as error:  # reported by the test
            errors.append(error)

    cluster.stall_standby()
    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        wait_for(lambda: sync_waits(cluster) > 0 or not thread.is_alive(), "the commit to wait for the standby", 30)
        assert thread.is_alive(), f"committed while the synchronous standby was stalled: not durable {errors}"
    finally:
        cluster.resume()
    thread.join(30)
    assert not thread.is_alive() and not errors, errors
    cluster.caught_up()


def test_the_sql_api_commit_waits_for_the_synchronous_standby_through_the_pooler(
    pooler: PgBouncer, pooled_server, pooled_cluster: PgCluster
) -> None:
    """The SQL API's callers bring their own sessions: the functions must ask for synchronous_commit themselves."""
    group = f"sql-sync-{uuid.uuid4().hex[:8]}"
    sql_api_commit(pooler.url(), group, 1)
    assert_waits_for_the_standby(pooled_cluster, lambda: sql_api_commit(pooler.url(), group, 2))
    assert stored(pooled_cluster, group) == {0: 2}
