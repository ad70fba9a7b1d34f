"""The contract's core through PgBouncer in transaction and in session pool mode, with the pooler's default settings.

One ``offsetstore serve`` per pool mode, its schema migrated through the pooler; PostgreSQL
behind it is a primary with a synchronous standby whose default ``synchronous_commit`` is
off, so durability and timeouts hold only if the store's own settings get through.
"""

from __future__ import annotations

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import psycopg
import pytest

from offsetstore.client import (
    OffsetCommit,
    OffsetMismatchError,
    OffsetStoreClient,
    OffsetStoreError,
    StaleGenerationError,
    StoreUnavailableError,
)
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc
from tests.fixtures.concurrency import run_in_threads
from tests.fixtures.fix_pg_cluster import PgCluster, pg_single
from tests.fixtures.fix_pgbouncer import PgBouncer, pgbouncer
from tests.fixtures.fix_production import GAP_STATUSES, health_or_exit, launched, offsetstore, status_of
from tests.fixtures.fix_server import Served

TOPIC = "orders"


@pytest.fixture
def client(pooled_server: Served) -> OffsetStoreClient:
    with OffsetStoreClient(pooled_server.address, timeout=20) as client:
        yield client


@pytest.fixture
def group_id() -> str:
    return f"pool-{uuid.uuid4().hex[:12]}"


def test_join_commit_with_fencing_and_compare_and_set(client: OffsetStoreClient, group_id: str) -> None:
    first = client.join_group(group_id)
    client.commit_offsets(group_id, {(TOPIC, 0): 10, (TOPIC, 1): 20}, generation=first)
    second = client.join_group(group_id)
    assert second == first + 1

    # The writer of the older generation is fenced, and writes nothing.
    with pytest.raises(StaleGenerationError) as stale:
        client.commit_offsets(group_id, {(TOPIC, 0): 99}, generation=first)
    assert stale.value.reason == "STALE_GENERATION"

    # Compare-and-set: the stored offset must be the expected one, or nothing is written.
    with pytest.raises(OffsetMismatchError) as mismatch:
        client.commit_offsets(group_id, [OffsetCommit(TOPIC, 0, 11, expected_offset=9)], generation=second)
    assert mismatch.value.reason == "OFFSET_MISMATCH"
    client.commit_offsets(group_id, [OffsetCommit(TOPIC, 0, 11, expected_offset=10)], generation=second)

    fetched = client.fetch_offsets(group_id)
    assert {(tp.topic, tp.partition): c.offset for tp, c in fetched.offsets.items()} == {(TOPIC, 0): 11, (TOPIC, 1): 20}
    assert fetched.generation == second


def test_fetch_pages_through_a_large_group(client: OffsetStoreClient, pooled_server: Served, group_id: str) -> None:
    offsets = {(TOPIC, p): 1000 + p for p in range(250)}
    client.commit_offsets(group_id, offsets)

    pages, token = [], ""
    with grpc.insecure_channel(pooled_server.address) as channel:
        stub = offset_store_pb2_grpc.OffsetStoreServiceStub(channel)
        while True:
            page = stub.FetchOffsets(
                pb.FetchOffsetsRequest(group_id=group_id, page_size=100, page_token=token), timeout=20
            )
            pages.append({(o.topic, o.partition): o.offset for o in page.offsets})
            token = page.next_page_token
            if not token:
                break
    assert [len(p) for p in pages] == [100, 100, 50]
    assert {k: v for page in pages for k, v in page.items()} == offsets
    # The client reads the pages itself.
    assert {(tp.topic, tp.partition): c.offset for tp, c in client.fetch_offsets(group_id).offsets.items()} == offsets


def test_reset_dry_run_then_execute_history_and_describe(client: OffsetStoreClient, group_id: str) -> None:
    generation = client.join_group(group_id)
    client.commit_offsets(group_id, {(TOPIC, 0): 100, (TOPIC, 1): 200}, generation=generation)

    preview = client.reset_offsets(group_id, all_topics=True, to_offset=5, dry_run=True)
    assert preview.dry_run and sorted(c.new_offset for c in preview.changes) == [5, 5]
    assert [c.offset for c in client.fetch_offsets(group_id).offsets.values()] == [100, 200]

    applied = client.reset_offsets(group_id, all_topics=True, to_offset=5)
    assert applied.generation > generation
    assert [c.offset for c in client.fetch_offsets(group_id).offsets.values()] == [5, 5]
    with pytest.raises(StaleGenerationError):
        client.commit_offsets(group_id, {(TOPIC, 0): 101}, generation=generation)

    history = client.list_offset_history(group_id, page_size=2)
    assert len(history.items) == 2 and history.next_page_token
    rest = client.list_offset_history(group_id, page_size=100, page_token=history.next_page_token)
    changes = sorted((c.partition, c.previous_offset, c.new_offset) for c in history.items + rest.items)
    assert changes == [(0, -1, 100), (0, 100, 5), (1, -1, 200), (1, 200, 5)]

    described = client.describe_group(group_id)
    assert described.generation == applied.generation
    assert sorted((p.partition, p.offset) for p in described.partitions) == [(0, 5), (1, 5)]


def test_many_concurrent_commits_and_fetches_answer_without_error(pooled_server: Served) -> None:
    """8 clients x 200 calls: prepared statements, settings and transactions never leak between sessions."""
    prefix = f"pool-load-{uuid.uuid4().hex[:8]}"

    def work(i: int) -> Counter[str]:
        seen: Counter[str] = Counter()
        group = f"{prefix}-{i}"
        with OffsetStoreClient(pooled_server.address, timeout=30) as client:
            for n in range(100):
                for call, args in (
                    (client.commit_offsets, ({(TOPIC, p): n for p in range(4)},)),
                    (client.fetch_offsets, ()),
                ):
                    try:
                        call(group, *args)
                        seen["OK"] += 1
                    except OffsetStoreError as error:
                        seen[f"{status_of(error).name}: {error.message}"] += 1
        return seen

    seen = sum(run_in_threads(8, work), Counter())
    assert seen == Counter({"OK": 1600})


def test_a_locked_table_answers_unavailable_within_the_stores_timeout(
    client: OffsetStoreClient, pooled_cluster: PgCluster, group_id: str
) -> None:
    """The store's lock and statement timeouts (1 s here) hold through the pooler: not the caller's 20 s deadline."""
    client.commit_offsets(group_id, {(TOPIC, 0): 1})
    with psycopg.connect(pooled_cluster.primary.conninfo()) as locker:
        locker.execute("LOCK TABLE offsetstore.groups, offsetstore.offsets IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreUnavailableError) as unavailable:
            client.commit_offsets(group_id, {(TOPIC, 0): 2})
        assert unavailable.value.reason == "STORE_UNAVAILABLE"
        locker.rollback()
    client.commit_offsets(group_id, {(TOPIC, 0): 3})
    assert client.fetch_offsets(group_id).offsets[(TOPIC, 0)].offset == 3


def test_a_commit_is_not_acknowledged_before_the_synchronous_standby_has_it(
    pooled_server: Served, pooled_cluster: PgCluster, pooler: PgBouncer
) -> None:
    """``synchronous_commit = on`` reaches the store's transactions through the pooler, and nothing cancels its wait into an OK.

    The database's default is off: were the store's setting dropped, the commits below would
    be acknowledged while the standby is stalled, and lost if the primary died then. A COMMIT
    waiting for the standby that is cancelled (a deadline, a statement timeout) returns
    success with only a WARNING in PostgreSQL: callers with longer deadlines, whose commits
    may share that transaction, must not be told OK either.
    """
    groups = [f"pool-sync-{uuid.uuid4().hex[:8]}-{i}" for i in range(4)]
    with OffsetStoreClient(pooled_server.address, timeout=20) as client:
        for group in groups:
            client.commit_offsets(group, {(TOPIC, 0): 1})
        pooled_cluster.stall_standby()
        try:

            def commit(i: int) -> str:
                try:
                    client.commit_offsets(groups[i], {(TOPIC, 0): 2}, timeout=2 + i)
                except OffsetStoreError as error:
                    return status_of(error).name
                return "OK"

            answers = run_in_threads(len(groups), commit)
        finally:
            pooled_cluster.resume()
        assert set(answers) <= {code.name for code in GAP_STATUSES}, answers
        pooled_cluster.caught_up()
        # Once the standby is back the store commits again, without a restart.
        client.commit_offsets(groups[0], {(TOPIC, 0): 3})
        assert client.fetch_offsets(groups[0]).offsets[(TOPIC, 0)].offset == 3


def test_serve_refuses_prepared_statements_behind_a_transaction_pooler(pooled_cluster: PgCluster) -> None:
    """The default (server-side prepared statements) cannot work behind a transaction pooler: one line names the fix."""
    with (
        pgbouncer("transaction", pooled_cluster.primary.port) as bouncer,
        launched(bouncer.url(), "--no-migrate") as served,
    ):
        assert health_or_exit(served, within=30).startswith("exit"), served.output()[-3000:]
        assert served.process.returncode == 2, served.output()[-3000:]
        output = served.output()
        assert "Traceback" not in output, output
        assert "--database-prepare off" in output, output


def test_migrators_started_together_through_a_transaction_pooler_migrate_once() -> None:
    """Replicas that start at once each migrate: the migration lock is per transaction, which a transaction pooler keeps."""
    with pg_single() as node, pgbouncer("transaction", node.port) as bouncer:
        with ThreadPoolExecutor(3) as pool:
            runs = list(pool.map(lambda _: offsetstore("migrate", "--database-url", bouncer.url()), range(3)))
        for run in runs:
            assert run.returncode == 0, run.stdout + run.stderr
        # One applied the migrations; the others, once they had the lock, found nothing left to do.
        said = [run.stdout.strip() for run in runs]
        applied = [line for line in said if line.endswith("migrations applied")]
        assert len(applied) == 1, said
        assert all(line.endswith(": nothing to migrate") for line in said if line not in applied), said
        assert node.query("SELECT count(*) FROM offsetstore.alembic_version") == 1
