"""Retention on real PostgreSQL: daily history partitions dropped whole, idle groups expired loudly.

Every test here works in the module's own database: maintenance drops history partitions
and expires idle groups of the whole database, which must not touch other tests' data.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from offsetstore.client import (
    ChangeKind,
    InvalidArgumentError,
    OffsetCommit,
    OffsetStoreClient,
    StaleGenerationError,
    Watermark,
)
from offsetstore.core.durations import format_duration, parse_duration
from offsetstore.runtime import maintenance
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.server.config import Settings
from offsetstore.server.limits import Limits
from offsetstore.storage import retention
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.retention import fresh, insert_history, midnight, partition_of, partitions
from tests.fixtures.storage import engine_of
from tests.fixtures.waits import wait_for


@pytest.fixture(scope="module")
def series() -> metrics.StoreSeries:
    return metrics.StoreSeries()


@pytest.fixture(scope="module")
def rstore(module_database_url: str, series: metrics.StoreSeries) -> Iterator[Store]:
    store = Store.open(StoreConfig(module_database_url, hot_pool_size=8, observer=series.observer))
    yield store
    store.dispose()


@pytest.fixture(scope="module")
def registry(rstore: Store, series: metrics.StoreSeries) -> CollectorRegistry:
    return metrics.build_registry(rstore, series=series)


@pytest.fixture(scope="module")
def rclient(rstore: Store, registry: CollectorRegistry) -> Iterator[OffsetStoreClient]:
    server = ServerHandle(
        rstore, "127.0.0.1:0", interceptors=metrics.interceptors(registry), limits=Limits(max_workers=8)
    )
    with server, OffsetStoreClient(server.address, timeout=20) as client:
        yield client


# --- durations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800), ("1d12h", 129600), ("3600", 3600), ("0", 0)],
)
def test_durations_read_as_operators_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds
    assert parse_duration(format_duration(seconds)).total_seconds() == seconds
    settings = Settings.load({"history_retention": text}, {})
    assert settings.history_retention == seconds


@pytest.mark.parametrize("text", ["", "7 days", "1M", "-5", "nan", "d"])
def test_bad_durations_name_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match="OFFSETSTORE_OFFSETS_RETENTION"):
        Settings.load({}, {"OFFSETSTORE_OFFSETS_RETENTION": text})


def test_retention_defaults_are_the_contracts() -> None:
    settings = Settings.load({}, {})
    assert (settings.history_retention, settings.offsets_retention, settings.maintenance_interval) == (
        7 * 86400,
        0,
        60,
    )


# --- history partitions -----------------------------------------------------------------


def test_history_lands_in_its_days_partition_and_maintenance_drops_exactly_the_old_days(
    rstore: Store, registry: CollectorRegistry
) -> None:
    now = datetime.now(UTC)
    today = midnight(now)
    group = fresh()
    days = (-30, -10, 0, 1, 6, 9, 12)
    times = {d: now + timedelta(days=d) for d in days}

    def day_partition(d: int) -> str:
        return f"offset_history_p{today + timedelta(days=d):%Y%m%d}"

    with engine_of(rstore).begin() as conn:
        insert_history(conn, group, list(times.values()))
        where = partition_of(conn, group)
    # The past and today fall in the "before" partition (the store before partitioning),
    # tomorrow in its day's, and days with no partition yet in DEFAULT.
    (before,) = [p.name for p in partitions(rstore) if p.lower is None]
    assert where[times[-30]] == where[times[-10]] == where[times[0]] == before
    assert where[times[1]] == day_partition(1)
    assert where[times[6]] == where[times[9]] == where[times[12]] == "offset_history_default"

    # Making a day's partition moves its rows out of DEFAULT.
    with engine_of(rstore).begin() as conn:
        made = retention.make_history_partitions(conn, today.date(), days_ahead=9)
        where = partition_of(conn, group)
    assert made == [day_partition(d) for d in range(4, 10)]
    assert (where[times[6]], where[times[9]], where[times[12]]) == (
        day_partition(6),
        day_partition(9),
        "offset_history_default",
    )

    # Twelve days on, history retention 5 days: the before partition and the days that
    # ended before the cutoff go; the day holding the cutoff stays.
    later = now + timedelta(days=12)
    cutoff = later - timedelta(days=5)
    existing = partitions(rstore)
    worker = maintenance.Maintenance(
        rstore.aio,
        history_retention=5 * 86400,
        offsets_retention=0,
        metrics=metrics.retention_metrics(registry),
        clock=lambda: later,
    )
    result = rstore.wait(worker.run_once())
    assert result is not None
    assert result.made == [day_partition(d) for d in range(12, 16)]
    assert sorted(result.dropped) == sorted([before, *(day_partition(d) for d in range(1, 7))])
    assert sorted(result.dropped) == sorted(p.name for p in existing if p.upper <= cutoff)
    left = {p.name: p for p in partitions(rstore)}
    oldest = min(left.values())
    assert oldest.name == day_partition(7) and oldest.lower is not None and oldest.lower <= cutoff < oldest.upper
    with engine_of(rstore).begin() as conn:
        where = partition_of(conn, group)
        # Only the rows of kept days are left; the DEFAULT row moved into its new day.
        assert where == {times[9]: day_partition(9), times[12]: day_partition(12)}
        assert conn.execute(sa.text("SELECT count(*) FROM offsetstore.offset_history_default")).scalar_one() == 0
        assert retention.history_horizon(conn) == oldest.lower
    assert registry.get_sample_value("offsetstore_maintenance_seconds_count") >= 1
    age = registry.get_sample_value("offsetstore_history_oldest_seconds")
    assert age is not None and age >= 0


def test_commits_keep_flowing_while_maintenance_makes_and_drops_partitions(rstore: Store) -> None:
    # A concurrent commit load sees no error and no stall over a second while rounds
    # make partitions (moving DEFAULT rows) and drop them, again and again.
    stop = threading.Event()
    errors: list[BaseException] = []
    slowest = [0.0]
    commits = [0]

    def load(n: int) -> None:
        group = fresh(f"load{n}-")
        offset = 0
        while not stop.is_set():
            offset += 1
            started = time.perf_counter()
            try:
                rstore.commit_offsets(group, [OffsetCommit("t", p, offset) for p in range(4)])
            except BaseException as error:  # noqa: BLE001 - any failure fails the test
                errors.append(error)
                return
            slowest[0] = max(slowest[0], time.perf_counter() - started)
            commits[0] += 1

    holding, release = threading.Event(), threading.Event()

    def long_writer() -> None:
        # A transaction that wrote history and stays open (a long sink batch) until the round
        # is over: the round's DDL must give up on its lock within LOCK_TIMEOUT_MS, not queue
        # the commits behind it for as long.
        with engine_of(rstore).begin() as conn:
            insert_history(conn, fresh("long-"), [datetime.now(UTC)])
            holding.set()
            release.wait(60)

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        start = datetime.now(UTC)
        writer = threading.Thread(target=long_writer)
        writer.start()
        holding.wait(10)
        try:
            blocked = rstore.wait(
                maintenance.Maintenance(
                    rstore.aio,
                    history_retention=2 * 86400,
                    offsets_retention=0,
                    clock=lambda: start + timedelta(days=19),
                ).run_once()
            )
        finally:
            release.set()
        writer.join()
        assert blocked is not None and blocked.deferred
        for day in range(20, 26):
            # Each round is "day" days on: it makes new days ahead and drops the ones behind.
            when = start + timedelta(days=day)
            with engine_of(rstore).begin() as conn:
                insert_history(conn, fresh("late-"), [when + timedelta(days=5)])  # into DEFAULT
            worker = maintenance.Maintenance(
                rstore.aio, history_retention=2 * 86400, offsets_retention=0, clock=lambda w=when: w
            )
            assert rstore.wait(worker.run_once()) is not None
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert commits[0] > 20
    assert slowest[0] < 1.0


def test_only_one_of_two_servers_runs_a_round_at_a_time(rstore: Store, module_database_url: str) -> None:
    other = Store.open(StoreConfig(module_database_url, hot_pool_size=2))
    inside = threading.Barrier(2, timeout=10)
    running = [0, 0]
    skipped = threading.Event()

    class Slow(maintenance.Maintenance):
        async def _round(self) -> maintenance.RoundResult:
            running[0] += 1
            running[1] = max(running[1], running[0])
            # A round that lasts until the other server has tried its own.
            await asyncio.to_thread(skipped.wait, 10)
            running[0] -= 1
            return maintenance.RoundResult()

    stores = (rstore, other)
    workers = [Slow(s.aio, history_retention=0, offsets_retention=0) for s in stores]
    results: list[object] = [None, None]

    def run(i: int) -> None:
        inside.wait()
        results[i] = stores[i].wait(workers[i].run_once())
        if results[i] is None:
            skipped.set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Exactly one ran; the other found the lock taken and skipped its round.
        assert sorted(r is None for r in results) == [False, True]
        assert running[1] == 1
        # The lock is released after the round: the next one runs.
        assert rstore.wait(workers[0].run_once()) is not None
        assert other.wait(workers[1].run_once()) is not None
    finally:
        other.dispose()


def test_stale_watermarks_of_topics_nobody_reads_are_dropped(rstore: Store) -> None:
    orphan, read = fresh("orphan-"), fresh("read-")
    rstore.report_watermarks([Watermark(orphan, 0, 0, 10), Watermark(read, 0, 0, 10)])
    rstore.commit_offsets(fresh(), [OffsetCommit(read, 0, 5)])
    with engine_of(rstore).begin() as conn:
        conn.execute(sa.text("UPDATE offsetstore.watermarks SET updated_at = now() - interval '3 days'"))
    worker = maintenance.Maintenance(rstore.aio, history_retention=2 * 86400, offsets_retention=0)
    assert rstore.wait(worker.run_once()) is not None
    with engine_of(rstore).connect() as conn:
        topics = set(conn.execute(sa.text("SELECT topic FROM offsetstore.watermarks")).scalars())
    assert read in topics and orphan not in topics


# --- expiry ---------------------------------------------------------------------------


def test_idle_groups_expire_loudly_and_busy_ones_survive(
    rstore: Store, registry: CollectorRegistry, rclient: OffsetStoreClient, caplog: pytest.LogCaptureFixture
) -> None:
    idle, busy, joiner = fresh("idle-"), fresh("busy-"), fresh("busy-")
    fenced = rclient.join_group(idle)
    generation = rclient.join_group(idle)
    rclient.commit_offsets(idle, {("t", 0): 10, ("t", 1): 20}, generation=generation)
    rclient.commit_offsets(busy, {("t", 0): 1})
    rclient.commit_offsets(joiner, {("t", 0): 1})
    before = registry.get_sample_value("offsetstore_groups_expired_total") or 0.0

    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_busy() -> None:
        offset = 1
        while not stop.wait(0.5):
            offset += 1
            try:
                rclient.commit_offsets(busy, {("t", 0): offset})
                rclient.join_group(joiner)  # joins only: active too
            except BaseException as error:  # noqa: BLE001
                errors.append(error)

    caplog.set_level("INFO", logger="offsetstore.storage.retention")
    committer = threading.Thread(target=keep_busy)
    committer.start()
    worker = maintenance.Maintenance(
        rstore.aio, history_retention=0, offsets_retention=2, interval=1, metrics=metrics.retention_metrics(registry)
    )
    rounds_task = asyncio.run_coroutine_threadsafe(worker.run(), rstore.loop)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if idle not in {g.group_id for g in rclient.list_groups("idle-").items}:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the idle group did not expire")
        # One more round, in which the busy group must still survive.
        rounds = registry.get_sample_value("offsetstore_maintenance_seconds_count") or 0
        wait_for(
            lambda: (registry.get_sample_value("offsetstore_maintenance_seconds_count") or 0) > rounds + 1,
            "two more maintenance rounds",
            15,
        )
    finally:
        rounds_task.cancel()
        stop.set()
        committer.join()
    assert errors == []
    assert rclient.fetch_offsets(idle).offsets == {}
    assert rclient.fetch_offsets(idle).generation == 0
    assert {busy, joiner} <= {g.group_id for g in rclient.list_groups("busy-").items}
    assert rclient.fetch_offsets(joiner).offsets[("t", 0)].offset == 1
    assert rclient.fetch_offsets(busy).offsets[("t", 0)].offset > 1

    history = rclient.list_offset_history(idle).items
    expired = [c for c in history if c.kind == ChangeKind.EXPIRE]
    assert sorted((c.topic, c.partition, c.previous_offset, c.new_offset) for c in expired) == [
        ("t", 0, 10, -1),
        ("t", 1, 20, -1),
    ]
    assert {c.actor for c in expired} == {"offsetstore"} and {c.generation for c in expired} == {generation}
    # One log line names each expired group (the module's earlier, idle groups too), and the counter counts them.
    named = [getattr(r, "group", None) for r in caplog.records if r.getMessage() == "group expired"]
    assert named.count(idle) == 1 and busy not in named and joiner not in named
    assert registry.get_sample_value("offsetstore_groups_expired_total") == before + len(named)

    # The generation survives: the fenced writer stays fenced, a rejoin goes above all.
    with pytest.raises(StaleGenerationError):
        rclient.commit_offsets(idle, {("t", 0): 11}, generation=fenced)
    # Expiry is not a reset: the writer that held the current generation may commit again
    # (the group comes back), and the reset count, which Spark's checkpoint follows, stays.
    rclient.commit_offsets(idle, {("t", 0): 11}, generation=generation)
    described = rclient.describe_group(idle)
    assert (described.generation, described.reset_count) == (generation, 0)
    assert rclient.join_group(idle) > generation


def test_a_commit_racing_with_expiry_is_never_lost(rstore: Store) -> None:
    group = fresh()
    rstore.commit_offsets(group, [OffsetCommit("t", 0, 5)])
    with engine_of(rstore).begin() as conn:
        conn.execute(
            sa.text("UPDATE offsetstore.offsets SET commit_time = now() - interval '1 hour' WHERE group_id = :g"),
            {"g": group},
        )
        conn.execute(
            sa.text("UPDATE offsetstore.groups SET active_at = now() - interval '1 hour' WHERE group_id = :g"),
            {"g": group},
        )
    idle_for = timedelta(minutes=30)
    assert [g.group_id for g in rstore.expire_groups(idle_for, prefix=group)] == [group]  # a candidate
    # A commit holds the group's lock: expiry skips the group rather than wait.
    holder = engine_of(rstore).connect()
    try:
        holder.execute(sa.text("SELECT 1 FROM offsetstore.groups WHERE group_id = :g FOR NO KEY UPDATE"), {"g": group})
        assert rstore.run(retention.expire_group, group, idle_for) is None
        holder.execute(
            sa.text('UPDATE offsetstore.offsets SET "offset" = 6, commit_time = now() WHERE group_id = :g'),
            {"g": group},
        )
        holder.commit()
    finally:
        holder.close()
    # Picked as a candidate before the commit, the group is re-checked under the lock, which sees the commit.
    assert rstore.run(retention.expire_group, group, idle_for) is None
    assert rstore.fetch_offsets(group).offsets[("t", 0)].offset == 6


def test_expire_groups_previews_unless_executed(rclient: OffsetStoreClient) -> None:
    prefix = fresh("manual-")
    group = prefix + "-a"
    rclient.commit_offsets(group, {("t", 0): 3})
    wait_for(lambda: rclient.expire_groups(1, prefix=prefix) != [], "the group idle for 1 s", 10)
    preview = rclient.expire_groups(1, prefix=prefix)
    assert [(g.group_id, g.partition_count) for g in preview] == [(group, 1)]
    assert rclient.fetch_offsets(group).offsets[("t", 0)].offset == 3
    assert rclient.expire_groups(3600, prefix=prefix) == []

    done = rclient.expire_groups(timedelta(seconds=1), prefix=prefix, execute=True)
    assert [g.group_id for g in done] == [group]
    assert rclient.fetch_offsets(group).offsets == {}
    (change,) = rclient.list_offset_history(group, page_size=1).items
    assert change.kind == ChangeKind.EXPIRE and change.previous_offset == 3

    for bad in (0, -1):
        with pytest.raises(InvalidArgumentError):
            rclient.expire_groups(bad, prefix=prefix)
    with pytest.raises(InvalidArgumentError):
        rclient.expire_groups(1, prefix=prefix, limit=100_000)


def test_expire_groups_is_refused_without_idle_for(rclient: OffsetStoreClient) -> None:
    from offsetstore.v1 import offset_store_pb2 as pb

    stub = rclient._stub  # noqa: SLF001 - the raw RPC, to send a request the client never builds
    with pytest.raises(grpc.RpcError) as raised:
        stub.ExpireGroups(pb.ExpireGroupsRequest(prefix="x"), timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_two_servers_expiring_at_once_expire_each_group_once(rstore: Store, module_database_url: str) -> None:
    other = Store.open(StoreConfig(module_database_url, hot_pool_size=2))
    prefix = fresh("twice-")
    names = [f"{prefix}-{n:02d}" for n in range(12)]
    for name in names:
        rstore.commit_offsets(name, [OffsetCommit("t", 0, 1), OffsetCommit("t", 1, 2)])
    wait_for(lambda: len(rstore.expire_groups(timedelta(seconds=1), prefix=prefix)) == 12, "the groups idle 1 s", 10)
    start = threading.Barrier(2, timeout=10)
    done: list[list[str]] = [[], []]

    def expire(i: int, store: Store) -> None:
        start.wait()
        done[i] = [g.group_id for g in store.expire_groups(timedelta(seconds=1), prefix=prefix, execute=True)]

    threads = [threading.Thread(target=expire, args=(i, s)) for i, s in enumerate((rstore, other))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        other.dispose()
    assert sorted(done[0] + done[1]) == names
    with engine_of(rstore).connect() as conn:
        expire_rows = conn.execute(
            sa.text("SELECT count(*) FROM offsetstore.offset_history WHERE starts_with(group_id, :p) AND kind = :k"),
            {"p": prefix, "k": int(ChangeKind.EXPIRE)},
        ).scalar_one()
    assert expire_rows == 2 * len(names)


def test_the_asyncio_client_expires_too(rstore: Store) -> None:
    import asyncio

    from offsetstore.client import AsyncOffsetStoreClient

    prefix = fresh("async-")
    rstore.commit_offsets(prefix + "-a", [OffsetCommit("t", 0, 1)])
    wait_for(lambda: rstore.expire_groups(timedelta(seconds=1), prefix=prefix) != [], "the group idle 1 s", 10)
    server = ServerHandle(rstore, "127.0.0.1:0", limits=Limits(max_workers=4))

    async def run() -> tuple[list[str], list[str]]:
        async with AsyncOffsetStoreClient(server.address, timeout=20) as client:
            preview = await client.expire_groups(1, prefix=prefix)
            done = await client.expire_groups(timedelta(seconds=1), prefix=prefix, execute=True)
            return [g.group_id for g in preview], [g.group_id for g in done]

    with server:
        assert asyncio.run(run()) == ([prefix + "-a"], [prefix + "-a"])
    assert rstore.fetch_offsets(prefix + "-a").offsets == {}
