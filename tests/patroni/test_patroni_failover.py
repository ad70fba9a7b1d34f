"""A Patroni leader dies under a commit load: Patroni promotes the synchronous replica and `offsetstore serve` finds it.

A real ``offsetstore serve`` process runs over libpq's multi-host URL listing the three members
with ``target_session_attrs=read-write``; nothing tells it which member leads. Writers commit to
groups of their own and record every acknowledgement; the leader's Patroni and PostgreSQL are
SIGKILLed together mid-load (a machine that dies). Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.fix_patroni import PatroniCluster, PatroniMember
from tests.fixtures.fix_production import GAP_STATUSES, CommitLoad, log_lines, metric, serving
from tests.fixtures.fix_server import Served
from tests.fixtures.processes import wait_for

SYNCHRONOUS = "offsetstore_database_synchronous_replication"


class PromotionWatch:
    """Polls the survivors' ``/primary`` check (Patroni's own word) and records when one first answers 200.

    Then, on the new leader, when PostgreSQL first has a synchronous standby streaming: a
    commit acknowledged before that had no copy but the new leader's.
    """

    def __init__(self, survivors: list[PatroniMember]) -> None:
        self.promoted: tuple[PatroniMember, float] | None = None
        self.synchronous_at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, args=(survivors,), daemon=True)
        self.thread.start()

    def watch(self, survivors: list[PatroniMember]) -> None:
        while not self.stop.is_set() and self.promoted is None:
            for member in survivors:
                if member.is_primary():
                    self.promoted = (member, time.monotonic())
                    break
            self.stop.wait(0.05)
        while not self.stop.is_set() and self.promoted is not None and self.synchronous_at is None:
            with contextlib.suppress(psycopg.Error):
                rows = self.promoted[0].query("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'")
                if rows:
                    self.synchronous_at = time.monotonic()
            self.stop.wait(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)


def changes_on(member: PatroniMember, prefix: str) -> set[tuple[str, int, int]]:
    """(group, partition, new offset) of every commit in the member's history, read directly."""
    rows = member.query(
        f"SELECT group_id, \"partition\", new_offset FROM offsetstore.offset_history WHERE group_id LIKE '{prefix}-%'"
    )
    return {(str(g), int(p), int(o)) for g, p, o in rows}


def offsets_on(member: PatroniMember, prefix: str) -> dict[tuple[str, int], int]:
    rows = member.query(
        f'SELECT group_id, "partition", "offset" FROM offsetstore.offsets WHERE group_id LIKE \'{prefix}-%\''
    )
    return {(str(g), int(p)): int(o) for g, p, o in rows}


def explain(patroni: PatroniCluster, served: Served, load: CommitLoad) -> str:
    """What the cluster and the server were doing, for a failure's report."""
    lines = [f"failed calls {dict(load.statuses())}, last: {load.failures[-3:]}"]
    for member in patroni.alive():
        lines.append(f"{member.name} /cluster: {member.rest('/cluster')}")
        with contextlib.suppress(psycopg.Error):
            lines.append(f"{member.name} pg_stat_replication: {patroni.replication(member)}")
    lines += log_lines(served, "WARNING", "ERROR", "synchronous")[-30:]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("patroni", "flags"),
    [
        pytest.param("sync", (), id="synchronous_mode"),
        pytest.param("strict", (), id="synchronous_mode_strict"),
        # Not strict, but the server itself refuses to acknowledge while the leader has no synchronous standby.
        pytest.param("sync", ("--require-synchronous-replication",), id="synchronous_mode-require"),
    ],
    indirect=["patroni"],
)
def test_a_killed_patroni_leader_loses_no_acknowledged_commit(patroni: PatroniCluster, flags: tuple[str, ...]) -> None:
    with serving(patroni.url(), "--database-prepare", "on", *flags) as served:
        assert metric(served, SYNCHRONOUS) == 1, f"{SYNCHRONOUS} before the kill: {metric(served, SYNCHRONOUS)}"
        leader, standby = patroni.leader(), patroni.synchronous_standby()
        assert leader is not None and standby is not None
        survivor = next(m for m in patroni.members if m not in (leader, standby))
        # Watching from before the kill: until then both answer 503.
        watch = PromotionWatch([standby, survivor])
        load = CommitLoad(served.address)
        load.start()
        try:
            wait_for(lambda: load.acks_after(0) >= 300, "300 commits before the kill")
            assert not load.failures, f"calls failed before the kill: {load.failures[:5]}"
            leader.crash(patroni.pids)
            killed = time.monotonic()
            wait_for(lambda: watch.promoted is not None, "Patroni to promote a replica", 90)
            wait_for(lambda: load.writers_acked_after(killed) == load.writers, "every writer to commit again", 60)
            # The load goes on until the new leader has a synchronous standby again, as Patroni names it.
            wait_for(lambda: watch.synchronous_at is not None, "a synchronous standby of the new leader", 120)
            wait_for(lambda: patroni.replicating(replicas=1), "the survivor to be the new synchronous standby", 120)
        except AssertionError:
            print(explain(patroni, served, load))
            raise
        finally:
            load.finish()
            watch.finish()
        assert watch.promoted is not None
        new_leader, promoted_at = watch.promoted
        first = load.first_ack_after(killed)
        assert first is not None
        lost = load.lost(changes_on(new_leader, load.prefix))
        statuses = load.statuses()
        assert watch.synchronous_at is not None
        synchronous_after = watch.synchronous_at - killed
        # Polled: an upper bound of the commits the new leader acknowledged with no synchronous standby.
        unreplicated = sum(
            1 for _, _, started, ended in load.acked if started > killed and ended < watch.synchronous_at
        )
        setup = " ".join([patroni.mode, *flags])
        print(
            f"\npatroni failover ({setup}, ttl {patroni.ttl} s): leader {leader.name} killed with its Patroni; "
            f"{new_leader.name} answered /primary {promoted_at - killed:.2f} s after the kill; first commit OK "
            f"{first - killed:.2f} s after the kill; {len(load.acked)} acknowledged commits checked, {len(lost)} "
            f"missing on the new leader; failed calls {dict(statuses)}; a synchronous standby again "
            f"{synchronous_after:.2f} s after the kill, {unreplicated} commits acknowledged before it; "
            f"{SYNCHRONOUS} then {metric(served, SYNCHRONOUS)}"
        )
        assert new_leader is standby, f"Patroni promoted {new_leader.name}, not the synchronous standby {standby.name}"
        assert lost == [], f"acknowledged commits missing on the new leader: {lost[:10]}"
        assert set(statuses) <= {code.name for code in GAP_STATUSES}, statuses
        # The server was never restarted, and reads what the new leader has.
        assert served.process.poll() is None, "the server exited"
        stored = offsets_on(new_leader, load.prefix)
        with OffsetStoreClient(served.address, timeout=20) as client:
            for group in load.all_groups()[:4]:
                fetched = {(tp.topic, tp.partition): c.offset for tp, c in client.fetch_offsets(group).offsets.items()}
                assert fetched == {("orders", p): o for (g, p), o in stored.items() if g == group}
