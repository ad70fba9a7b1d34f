"""Lag in seconds: watermarks reported at known times, the interpolated age of a group's committed offset."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import Boundary, GroupStatus, LagSecondsStatus, OffsetCommit, PartitionStatus, Watermark
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.storage import lag
from offsetstore.storage.engine import create_engine

# The test's clock and the database's are the same machine's; the statement runs a little after `now`.
SLACK = 3.0


@pytest.fixture
def topic() -> str:
    return f"lag-{uuid.uuid4().hex[:10]}"


def report(
    engine: sa.Engine,
    topic: str,
    log_end: int,
    seconds_ago: float,
    *,
    log_start: int = 0,
    now: datetime | None = None,
) -> None:
    """Reports partition 0's watermark as if it were seen ``seconds_ago`` (the storage function's clock seam).

    ``now``: the time it is ``seconds_ago`` before (default: the clock's, at this call).
    """
    at = (now or datetime.now(UTC)) - timedelta(seconds=seconds_ago)
    with engine.begin() as conn:
        storage.report_watermarks(conn, [Watermark(topic, 0, log_start, log_end)], at=at)


def commit(engine: sa.Engine, group_id: str, topic: str, offset: int) -> None:
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, offset)])


def described(engine: sa.Engine, group_id: str) -> PartitionStatus:
    with engine.connect() as conn:
        (partition,) = storage.describe_group(conn, group_id).partitions
    return partition


def samples(engine: sa.Engine, topic: str) -> list[tuple[int, datetime]]:
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT log_end_offset, sampled_at FROM offsetstore.watermark_samples "
                "WHERE topic = :t ORDER BY sampled_at"
            ),
            {"t": topic},
        ).all()


def test_an_offset_between_two_samples_is_as_old_as_the_interpolated_time(engine, group_id, topic):
    report(engine, topic, 0, seconds_ago=100)
    report(engine, topic, 100, seconds_ago=50)
    commit(engine, group_id, topic, 50)  # the log end passed 50 halfway: 75 s ago
    p = described(engine, group_id)
    assert p.lag_seconds_status == LagSecondsStatus.KNOWN
    assert 75 <= p.lag_seconds <= 75 + SLACK
    assert p.lag == 50


def test_caught_up_is_zero(engine, group_id, topic):
    report(engine, topic, 0, seconds_ago=100)
    report(engine, topic, 100, seconds_ago=50)
    commit(engine, group_id, topic, 100)
    p = described(engine, group_id)
    assert (p.lag_seconds, p.lag_seconds_status) == (0.0, LagSecondsStatus.KNOWN)


def test_no_samples_is_unknown(engine, group_id, topic):
    commit(engine, group_id, topic, 10)
    p = described(engine, group_id)
    assert (p.lag_seconds, p.lag_seconds_status) == (-1.0, LagSecondsStatus.NO_SAMPLES)


def test_a_sentinel_whose_boundary_is_unknown_is_unknown(engine, group_id, topic):
    report(engine, topic, 100, seconds_ago=10, log_start=-1)  # a log end, no log start
    commit(engine, group_id, topic, 5)
    with engine.begin() as conn:
        storage.reset_offsets(conn, group_id, {topic: []}, to_boundary=Boundary.EARLIEST)
    p = described(engine, group_id)
    assert p.offset == -2
    assert (p.lag_seconds, p.lag_seconds_status) == (-1.0, LagSecondsStatus.OFFSET_UNKNOWN)


def test_past_the_newest_sample_is_never_negative(engine, group_id, topic):
    report(engine, topic, 0, seconds_ago=60)
    report(engine, topic, 100, seconds_ago=10)
    report(engine, topic, 120, seconds_ago=8)
    commit(engine, group_id, topic, 110)  # between the last two reports: 9 s ago
    p = described(engine, group_id)
    assert 9 <= p.lag_seconds <= 9 + SLACK
    commit(engine, group_id, topic, 130)  # past the log end seen 8 s before: not an anomaly yet (issue 36)
    p = described(engine, group_id)
    assert (p.offset_past_log_end, p.status) == (False, GroupStatus.OK)  # "unconfirmed" in its reason
    # Issue 49: its lag is unknown (-1), and so is its lag in seconds, never 0 beside it.
    assert (p.lag, p.lag_seconds, p.lag_seconds_status) == (-1, -1.0, LagSecondsStatus.PAST_LOG_END)


def test_below_the_oldest_sample_extrapolates_at_the_observed_rate(engine, group_id, topic):
    report(engine, topic, 1000, seconds_ago=100)
    report(engine, topic, 1100, seconds_ago=50)  # 2 records a second
    commit(engine, group_id, topic, 900)  # 100 records before the oldest sample: 50 s before it
    p = described(engine, group_id)
    assert 150 <= p.lag_seconds <= 150 + SLACK


def test_a_flat_log_below_its_oldest_sample_is_at_least_that_sample_old(engine, group_id, topic):
    report(engine, topic, 1000, seconds_ago=100)
    report(engine, topic, 1000, seconds_ago=50)
    commit(engine, group_id, topic, 900)
    p = described(engine, group_id)
    assert 100 <= p.lag_seconds <= 100 + SLACK


def test_samples_are_bounded_per_partition(engine, topic):
    reports = lag.SAMPLES_KEPT + 10  # the ring and a bit, one report a slot
    # One reading of the clock for all: each report's own would drift by the time the loop takes,
    # and where the drift crossed a slot's boundary one slot was skipped (89 kept, not 90).
    now = datetime.now(UTC)
    for i in range(reports):
        report(engine, topic, i * 10, seconds_ago=(reports - i) * lag.SAMPLE_EVERY, now=now)
    kept = samples(engine, topic)
    assert len(kept) == lag.SAMPLES_KEPT
    assert [o for o, _ in kept] == [i * 10 for i in range(10, reports)]  # the newest stay


def test_a_partition_reported_often_gets_one_sample_a_slot(engine, topic):
    now = datetime.now(UTC)  # one clock reading: the loop's own time would stretch the 2 s
    for i in range(20):
        report(engine, topic, i, seconds_ago=1000 - i * 0.1, now=now)  # 2 s of reports, 10 a second
    assert 1 <= len(samples(engine, topic)) <= 2  # one slot, or two where a slot boundary fell in between


def test_retention_drops_old_samples(engine, topic):
    report(engine, topic, 0, seconds_ago=3605)
    report(engine, topic, 10, seconds_ago=10)
    with engine.begin() as conn:
        lag.expire_samples(conn, timedelta(minutes=30))
    assert [o for o, _ in samples(engine, topic)] == [10]


def test_describe_over_grpc_carries_lag_seconds(client, engine, group_id, topic):
    report(engine, topic, 0, seconds_ago=100)
    report(engine, topic, 100, seconds_ago=50)
    client.commit_offsets(group_id, [OffsetCommit(topic, 0, 50)])
    (p,) = client.describe_group(group_id).partitions
    assert p.lag_seconds_status == LagSecondsStatus.KNOWN
    assert 75 <= p.lag_seconds <= 75 + SLACK


def test_metrics_show_each_groups_largest_lag_in_seconds(module_database_url, topic):
    engine = create_engine(module_database_url, pool_size=2)
    store = Store.open(StoreConfig(module_database_url, hot_pool_size=2))
    try:
        report(engine, topic, 0, seconds_ago=100)
        report(engine, topic, 100, seconds_ago=50)
        commit(engine, "behind", topic, 50)
        commit(engine, "caught-up", topic, 100)
        commit(engine, "unknown", f"{topic}-never-reported", 5)
        registry = metrics.build_registry(store)
        seconds = registry.get_sample_value("offsetstore_group_lag_seconds", {"group": "behind"})
        assert 75 <= seconds <= 75 + SLACK
        assert registry.get_sample_value("offsetstore_group_lag_seconds", {"group": "caught-up"}) == 0
        assert registry.get_sample_value("offsetstore_group_lag_seconds", {"group": "unknown"}) is None
        # A group shown by its sums only (beyond its share of the series) has it too.
        with engine.connect() as conn:
            summed = metrics.group_sums(conn, ["behind"])
        assert 75 <= summed[0].lag_seconds <= 75 + SLACK
    finally:
        store.dispose()
        engine.dispose()
