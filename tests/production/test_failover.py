"""A primary SIGKILLed under a commit load and its standby promoted: `offsetstore serve` finds the new primary by itself.

The server runs over libpq's multi-host URL with ``target_session_attrs=read-write``. With a
synchronous standby no acknowledged commit may be missing afterwards; with an asynchronous one
the test reports how many were (a figure for the docs, not an assertion). Run with ``-s`` to
see the figures.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import pytest

from offsetstore.client import DeadlineExceededError, OffsetStoreClient, OffsetStoreError, StoreUnavailableError
from tests.fixtures.fix_haproxy import haproxy
from tests.fixtures.fix_pg_cluster import PgCluster, wait_for
from tests.fixtures.fix_production import (
    GAP_STATUSES,
    CommitLoad,
    HealthWatch,
    health_or_exit,
    launched,
    log_lines,
    metric,
    serving,
    status_of,
    stored_changes,
    stored_offsets,
)
from tests.fixtures.fix_server import Served

SYNC_STANDBYS = "offsetstore_database_synchronous_standbys"


@dataclass
class Failover:
    load: CommitLoad
    stored: dict[tuple[str, int], int]
    lost: list[tuple[str, int]]
    statuses: Counter[str]
    recovered_after: float
    standbys_before: float | None
    promoted_after: float
    health: set[str]


def fail_over(cluster: PgCluster, served: Served, *, stall_replication: bool = False) -> Failover:
    """Commits under load, kills the primary, promotes the standby, and waits until every writer commits again."""
    load = CommitLoad(served.address)
    load.start()
    try:
        wait_for(lambda: load.acks_after(0) >= 200, "200 commits before the kill")
        if stall_replication:
            # The commits acknowledged from now on reach only the primary's disk.
            cluster.stall_replication()
            stalled = time.monotonic()
            wait_for(lambda: load.acks_after(stalled) >= 200, "200 commits while replication is stalled")
        standbys_before = metric(served, SYNC_STANDBYS)
        assert not load.failures, f"calls failed before the kill: {load.failures[:5]}"
        health = HealthWatch(served.address)
        cluster.primary.crash()
        killed = time.monotonic()
        cluster.resume()
        cluster.standby.promote()
        promoted = time.monotonic()
        wait_for(lambda: load.writers_acked_after(killed) == load.writers, "every writer to commit again", 60)
    finally:
        load.finish()
    seen = health.finish()
    first = load.first_ack_after(killed)
    assert first is not None
    return Failover(
        load=load,
        stored=stored_offsets(cluster, load.prefix),
        lost=load.lost(stored_changes(cluster, load.prefix)),
        statuses=load.statuses(),
        recovered_after=first - killed,
        promoted_after=promoted - killed,
        standbys_before=standbys_before,
        health={status for status, at in seen if at > killed},
    )


def report(mode: str, spelling: str, result: Failover) -> None:
    print(
        f"\nfailover ({mode}, {spelling} URL): {len(result.load.acked)} commits acknowledged, "
        f"{len(result.lost)} of them missing on the new primary; standby promoted {result.promoted_after:.2f} s "
        f"after the kill, first commit {result.recovered_after:.2f} s after the kill "
        f"({result.recovered_after - result.promoted_after:.2f} s after the promotion); "
        f"failed calls {dict(result.statuses)}; health seen after the kill {sorted(result.health)}"
    )


def assert_no_wrong_answer(result: Failover, served: Served) -> None:
    """Calls in the gap failed only as the contract says (outcome unknown), and the server reads what the database has."""
    assert set(result.statuses) <= {code.name for code in GAP_STATUSES}, result.statuses
    # No offset that no writer sent.
    sent = result.load.sent()
    invented = [(g, p, o) for (g, p), o in result.stored.items() if o not in sent.get(g, set())]
    assert not invented, invented[:10]
    with OffsetStoreClient(served.address, timeout=20) as client:
        for group in result.load.all_groups()[:4]:
            fetched = {(tp.topic, tp.partition): c.offset for tp, c in client.fetch_offsets(group).offsets.items()}
            assert fetched == {("orders", p): o for (g, p), o in result.stored.items() if g == group}
    assert served.process.poll() is None, "the server exited"


def test_synchronous_failover_loses_no_acknowledged_commit(sync_cluster: PgCluster) -> None:
    # The other spellings of the URL: test_urls.py.
    with serving(sync_cluster.url()) as served:
        result = fail_over(sync_cluster, served)
        report("synchronous", "multi-host", result)
        assert result.lost == [], f"acknowledged commits missing after the failover: {result.lost[:10]}"
        # Each partition's offset is at least the last one acknowledged.
        last: dict[str, int] = {}
        for group, offset, _, _ in result.load.acked:
            last[group] = max(last.get(group, -1), offset)
        behind = [
            (g, p) for g in last for p in range(result.load.partitions) if result.stored.get((g, p), -1) < last[g]
        ]
        assert not behind, f"offsets behind the last acknowledged commit: {behind[:10]}"
        assert_no_wrong_answer(result, served)
        # The server knew the durability it gave, and learns on reconnecting that the new primary has no standby.
        assert result.standbys_before == 1, f"{SYNC_STANDBYS} before the kill: {result.standbys_before}"
        wait_for(lambda: metric(served, SYNC_STANDBYS) == 0, f"{SYNC_STANDBYS} to read 0 on the new primary", 30)


def test_asynchronous_failover_reports_the_acknowledged_commits_lost(async_cluster: PgCluster) -> None:
    with serving(async_cluster.url()) as served:
        result = fail_over(async_cluster, served, stall_replication=True)
        report("asynchronous, walsender stalled before the kill", "multi-host", result)
        assert_no_wrong_answer(result, served)
        assert result.standbys_before == 0, f"{SYNC_STANDBYS} before the kill: {result.standbys_before}"


def commits(client: OffsetStoreClient) -> bool:
    try:
        client.commit_offsets("gauge", {("orders", 0): 1})
    except (StoreUnavailableError, DeadlineExceededError):
        return False
    return True


def test_require_synchronous_replication_refuses_a_primary_without_a_synchronous_standby(
    async_cluster: PgCluster,
) -> None:
    with launched(async_cluster.url(), "--require-synchronous-replication") as served:
        # Refused: an exit at start, or a server that stays NOT_SERVING.
        health = health_or_exit(served, within=15)
        assert health != "SERVING", served.output()
        if health.startswith("exit"):
            assert health != "exit 0"
            assert "Traceback" not in served.output(), served.output()
            assert "synchronous" in served.output(), served.output()
        else:
            with OffsetStoreClient(served.address, timeout=10) as client, pytest.raises(StoreUnavailableError):
                client.commit_offsets("refused", {("orders", 0): 1})


def test_while_no_primary_is_up_commits_fail_at_once_and_resume_after_the_promotion(sync_cluster: PgCluster) -> None:
    """docs/errors.md: while PostgreSQL is down calls fail at once with UNAVAILABLE, health NOT_SERVING.

    The commits' 3 s deadline is shorter than the time the server may wait for a pooled
    connection (5 s): a server that queued them instead of failing would answer DEADLINE_EXCEEDED.
    """
    with serving(sync_cluster.url()) as served, OffsetStoreClient(served.address, timeout=3) as client:
        client.commit_offsets("down", {("orders", 0): 1})
        sync_cluster.primary.crash()
        wait_for(lambda: client.health() == "NOT_SERVING", "health NOT_SERVING", 30)
        answers = []
        for offset in range(2, 4):
            try:
                client.commit_offsets("down", {("orders", 0): offset})
                answers.append("OK")
            except OffsetStoreError as error:
                answers.append(status_of(error).name)
        assert answers == ["UNAVAILABLE"] * 2, f"{answers}\n" + "\n".join(log_lines(served, "WARNING", "ERROR")[-20:])
        sync_cluster.standby.promote()
        wait_for(lambda: commits(client), "a commit on the new primary", 60)
        assert client.health() == "SERVING"


def test_a_single_address_behind_haproxy_fails_over_without_a_restart(sync_cluster: PgCluster) -> None:
    """Patroni's usual front: one address, HAProxy routing to the node whose REST check says primary."""
    with haproxy(sync_cluster) as proxy, serving(proxy.url()) as served:
        result = fail_over(sync_cluster, served)
        report("synchronous", "single address behind HAProxy", result)
        assert result.lost == [], f"acknowledged commits missing after the failover: {result.lost[:10]}"
        assert_no_wrong_answer(result, served)


def test_a_primary_turned_read_only_answers_unavailable_and_is_used_again_once_writable(
    sync_cluster: PgCluster,
) -> None:
    """A read-only server (docs/errors.md: STORE_UNAVAILABLE) is a gap like a failover: never INTERNAL, no restart."""
    with serving(sync_cluster.url()) as served, OffsetStoreClient(served.address, timeout=10) as client:
        client.commit_offsets("read-only", {("orders", 0): 1})
        set_read_only(sync_cluster, "on")
        answers = []
        for offset in range(2, 4):
            try:
                client.commit_offsets("read-only", {("orders", 0): offset})
                answers.append("OK")
            except OffsetStoreError as error:
                answers.append(status_of(error).name)
        assert answers == ["UNAVAILABLE"] * 2, f"{answers}\n" + "\n".join(log_lines(served, "WARNING", "ERROR")[-20:])
        set_read_only(sync_cluster, "off")
        wait_for(lambda: commits(client), "a commit once the primary takes writes again", 60)
        assert (
            sync_cluster.primary.query("SELECT \"offset\" FROM offsetstore.offsets WHERE group_id = 'read-only'") == 1
        )


def set_read_only(cluster: PgCluster, value: str) -> None:
    cluster.primary.query(f"ALTER SYSTEM SET default_transaction_read_only = {value}", "postgres")
    cluster.primary.query("SELECT pg_reload_conf()", "postgres")
    wait_for(lambda: cluster.primary.query("SHOW default_transaction_read_only", "postgres") == value, "the reload")
