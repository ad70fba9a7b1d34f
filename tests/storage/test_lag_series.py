"""The console's sparkline data: lag in seconds at each log end sample (storage/lag.py's lag_series)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from offsetstore.client import Watermark
from offsetstore.storage.lag import lag_series

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_consumer_that_stops_gains_a_second_a_second() -> None:
    # The log grows 10 records a second; the consumer keeps up until 20 s, then stays at 200.
    points = [(at(t), 10 * t, min(10 * t, 200)) for t in range(0, 60, 10)]
    assert lag_series(points) == [(at(t), max(0.0, t - 20.0)) for t in range(0, 60, 10)]


def test_unknown_offsets_are_left_out_and_an_offset_below_every_sample_counts_from_the_oldest() -> None:
    points = [(at(0), 100, None), (at(10), 110, 50), (at(20), 130, 120)]
    assert lag_series(points) == [(at(10), 10.0), (at(20), 5.0)]  # 120 passed halfway from 110 to 130


def test_describe_fills_the_lag_history_only_when_asked(client, group_id) -> None:
    topic = f"ls-{uuid.uuid4().hex[:10]}"
    client.commit_offsets(group_id, {(topic, 0): 50})
    client.report_watermarks([Watermark(topic, 0, 0, 100)])
    assert client.describe_group(group_id).partitions[0].lag_history == ()
    from offsetstore.core import convert
    from offsetstore.v1 import offset_store_pb2 as pb

    answer = client._stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group_id, include_lag_history=True))
    (history,) = [convert.partition_status_from_proto(p).lag_history for p in answer.partitions]
    assert [seconds for _, seconds in history] == [0.0]  # the one sample: the log end passed 50 at it, at the earliest
