"""The Kafka example's exactly-once writer across a failover: the batch in flight is retried on the new primary, each record lands once.

Real messages from the Apache Kafka broker, the writer on libpq's multi-host URL over a primary and a
synchronous standby; the primary is SIGKILLed while batches are being written.
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from offsetstore.core.errors import StoreUnavailableError
from tests.fixtures.exactly_once import assert_exactly_once
from tests.fixtures.fix_kafka import read_all
from tests.fixtures.fix_pg_cluster import PgCluster
from tests.fixtures.fix_production import migrate
from tests.fixtures.processes import wait_for

pytest.importorskip("confluent_kafka", reason="the kafka extra (confluent-kafka) is not installed")

from offsetstore.kafka_integration import ExactlyOnceWriter  # noqa: E402

pytestmark = pytest.mark.kafka

#: What a writer may see while the primary is gone; it retries the batch (nothing else is retried).
TRANSIENT = (sa.exc.OperationalError, sa.exc.InterfaceError, StoreUnavailableError)


def test_every_record_lands_exactly_once_across_a_failover(broker, make_topic, sync_cluster: PgCluster) -> None:
    topic = make_topic(partitions=3, records=300)
    messages = read_all(broker, topic, expected=900)
    migrate(sync_cluster.url())
    table = "public.kafka_failover"
    sync_cluster.primary.query(
        f'CREATE TABLE {table} (topic text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL, value text)'
    )
    batches = [messages[i : i + 15] for i in range(0, len(messages), 15)]
    written = 0
    retries: list[str] = []
    failed_over = threading.Event()

    def fail_over() -> None:
        wait_for(lambda: written >= len(batches) // 3, "a third of the batches written")
        sync_cluster.failover()
        failed_over.set()

    killer = threading.Thread(target=fail_over, daemon=True)
    killer.start()
    with ExactlyOnceWriter(
        sync_cluster.url(), "kafka-failover", table, columns=("topic", "partition", "offset", "value")
    ) as writer:
        for batch in batches:
            stop_at = time.monotonic() + 60
            while True:
                try:
                    writer.write(batch, [{"value": m.value().decode()} for m in batch])
                    break
                except TRANSIENT as error:
                    # The outcome is unknown: the same batch again, whose delivered part the writer skips.
                    retries.append(type(error).__name__)
                    assert time.monotonic() < stop_at, f"no new primary found in 60 s: {error}"
                    time.sleep(0.05)  # a writer's backoff, not synchronization
            written += 1
    killer.join(60)
    assert failed_over.is_set(), "the failover did not happen during the writes"
    print(f"\nkafka writer failover: {len(batches)} batches, {len(retries)} failed attempts retried: {set(retries)}")

    with sync_cluster.standby.connect() as conn:
        found = conn.execute(f'SELECT topic, "partition", "offset" FROM {table}').fetchall()
        stored = dict(
            conn.execute(
                'SELECT "partition", "offset" FROM offsetstore.offsets WHERE group_id = \'kafka-failover\''
            ).fetchall()
        )
    assert_exactly_once([tuple(r) for r in found], topic.coordinates())
    assert stored == {p: 300 for p in range(3)}
