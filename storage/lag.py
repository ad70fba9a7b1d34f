"""Lag in seconds: log end samples recorded with each watermark report, and the interpolation over them.

How old is the oldest message a group has not consumed? The store knows, per partition, the
log ends reported over time. Each report records a sample (log end, time) for its partitions,
in a ring of :data:`SAMPLES_KEPT` slots of :data:`SAMPLE_EVERY` seconds each (so a partition
costs at most that many rows, whoever reports it and however often). A group's lag in seconds is now minus the time at which the log end passed
its committed offset:

- between two samples, linear between the newest sample at or below the offset and the
  first one after it (the current watermark counts as the newest sample);
- below the oldest sample, extrapolated back from the oldest sample at the rate the log grew
  from it to the current watermark; at least the oldest sample's age (a flat log, or a
  single sample, gives exactly that: a lower bound);
- caught up (the offset at or past the log end): 0, never negative. A partition past its
  log end is flagged by ``offset_past_log_end``; its lag in seconds is 0;
- unknown: -1, with the reason (:class:`~offsetstore.core.types.LagSecondsStatus`): no log
  end sampled for the partition, or a sentinel offset whose boundary is unknown.

The computation is one SQL expression (an aggregate over the partition's samples), so
DescribeGroup and the per-group metrics read it in the statement they already run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Float,
    FromClause,
    and_,
    case,
    cast,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    tuple_,
)

from offsetstore.core.types import LagSecondsStatus
from offsetstore.storage.schema import watermark_samples, watermarks

__all__ = [
    "NOW",
    "SAMPLES_KEPT",
    "SAMPLE_EVERY",
    "expire_samples",
    "lag_seconds_of",
    "lag_seconds_status",
    "lag_series",
    "with_samples",
]

#: Seconds a sample stands for: a partition gets at most one sample in each such slot of time,
#: so a reporter calling every 100 ms costs no more rows than one calling every 10 s.
SAMPLE_EVERY = 10
#: Slots per partition, a ring: the samples cover the last 15 minutes (older ones where a
#: slot was not reported again). Lag beyond them is extrapolated (see the module's docstring).
SAMPLES_KEPT = 90

#: The time of a report: the statement's, or ``%(at)s`` where given (tests report at known times).
NOW = "coalesce(%(at)s::timestamptz, statement_timestamp())"

# Runs as a CTE of the watermark upsert: the same statement, the same round trip, the same
# time. Each partition has SAMPLES_KEPT slots, the slot of a time being its SAMPLE_EVERY-second
# period modulo the ring: a slot keeps the first sample of its period, and a sample from an
# earlier lap of the ring is overwritten in place (an update that leaves the key alone: HOT,
# no index entry, nothing to delete). Bounded with no DELETE and no read of the other samples.
_SAMPLES = f"""
WITH sampled AS (
    INSERT INTO offsetstore.watermark_samples AS s (topic, partition, slot, sampled_at, log_end_offset)
    SELECT r.topic, r.partition,
        (floor(extract(epoch FROM {NOW}) / {SAMPLE_EVERY})::bigint %% {SAMPLES_KEPT})::smallint,
        {NOW}, r.log_end
    FROM unnest(%(topic)s::text[], %(partition)s::integer[], %(end)s::bigint[]) AS r(topic, partition, log_end)
    ON CONFLICT (topic, partition, slot) DO UPDATE SET
        sampled_at = EXCLUDED.sampled_at, log_end_offset = EXCLUDED.log_end_offset
    WHERE s.sampled_at <= EXCLUDED.sampled_at - make_interval(secs => {SAMPLE_EVERY})
)
"""


def with_samples(report_sql: str) -> str:
    """The watermark upsert ``report_sql`` (parameters topic, partition, end, at) recording samples too."""
    return _SAMPLES + report_sql


# What the SQL expression returns for the two unknowns; the API says -1 and the reason.
_NO_SAMPLES = -1.0
_NO_OFFSET = -2.0
_PAST_LOG_END = -3.0


def lag_seconds_of(committed: ColumnElement[Any], watermark: FromClause = watermarks) -> ColumnElement[float]:
    """Lag in seconds of ``committed`` (the effective offset: NULL where a sentinel's boundary is unknown).

    An expression over ``offsets`` outer-joined with ``watermark`` (the table, or the per-row
    probe of it that :mod:`.lag_columns` joins); -1 where no log end was
    sampled, -2 where the offset is unknown, -3 where it is past the log end (:func:`lag_seconds_status`
    turns these into -1 and the reason).
    """
    o, t = watermark_samples.c.log_end_offset, watermark_samples.c.sampled_at
    w = watermark.c
    log_end, seen_at = w.log_end_offset, w.updated_at
    now = func.statement_timestamp()
    below = o <= committed
    # The newest sample at or below the offset; the first after it (else the watermark); the oldest.
    a_t, a_o = func.max(t).filter(below), func.max(o).filter(below)
    b_t = func.coalesce(func.min(t).filter(o > committed), seen_at)
    b_o = func.coalesce(func.min(o).filter(o > committed), log_end)
    z_t, z_o = func.min(t), func.min(o)

    def seconds(interval: ColumnElement[Any]) -> ColumnElement[float]:
        return cast(func.extract("epoch", interval), Float)

    between = seconds(now - a_t) - cast(committed - a_o, Float) / cast(b_o - a_o, Float) * seconds(b_t - a_t)
    before_oldest = seconds(now - z_t) + cast(z_o - committed, Float) * seconds(seen_at - z_t) / cast(
        log_end - z_o, Float
    )
    interpolated = (
        select(
            case(
                (func.count() == 0, literal(_NO_SAMPLES, Float)),
                (a_t.is_not(None), func.greatest(0.0, between)),
                (and_(log_end > z_o, seen_at > z_t), func.greatest(0.0, before_oldest)),
                else_=func.greatest(0.0, seconds(now - z_t)),
            )
        )
        .where(watermark_samples.c.topic == w.topic, watermark_samples.c.partition == w.partition)
        .scalar_subquery()
    )
    return case(
        (log_end.is_(None), literal(_NO_SAMPLES, Float)),
        (committed.is_(None), literal(_NO_OFFSET, Float)),
        (committed == log_end, literal(0.0, Float)),
        # Past the log end the lag is unknown (-1), and so is how old it is: never 0 beside it.
        (committed > log_end, literal(_PAST_LOG_END, Float)),
        else_=interpolated,
    )


def lag_seconds_status(value: float | None) -> tuple[float, LagSecondsStatus]:
    """(lag in seconds or -1, why) of a value of :func:`lag_seconds_of`."""
    if value is None or value == _NO_SAMPLES:
        return -1.0, LagSecondsStatus.NO_SAMPLES
    if value == _NO_OFFSET:
        return -1.0, LagSecondsStatus.OFFSET_UNKNOWN
    if value == _PAST_LOG_END:
        return -1.0, LagSecondsStatus.PAST_LOG_END
    return float(value), LagSecondsStatus.KNOWN


def lag_series(points: Sequence[tuple[datetime, int, int | None]]) -> list[tuple[datetime, float]]:
    """Lag in seconds at each sample, from (sample time, log end then, committed offset then), oldest first.

    Pure: the time the log end passed the offset is interpolated between the samples up to
    that one, as :func:`lag_seconds_of` does for now; a sample without a known offset is left
    out, and an offset below every sample so far counts from the oldest (a lower bound).
    """
    out: list[tuple[datetime, float]] = []
    for i, (at, end, offset) in enumerate(points):
        if offset is None:
            continue
        if offset >= end:
            out.append((at, 0.0))
            continue
        passed = points[0][0]
        for (t0, e0, _), (t1, e1, _) in zip(points[: i + 1], points[1 : i + 1], strict=False):
            if e0 <= offset < e1:
                passed = t0 + (t1 - t0) * ((offset - e0) / (e1 - e0))
        out.append((at, max(0.0, (at - passed).total_seconds())))
    return out


def expire_samples(conn: Connection, older_than: timedelta, *, now: datetime | None = None, limit: int = 50_000) -> int:
    """Drops samples older than ``older_than``, and those of partitions whose watermark is gone; how many.

    Each partition keeps at most SAMPLES_KEPT anyway: this takes away what no report will
    replace (a topic nobody reports any more).
    """
    cutoff = (func.statement_timestamp() if now is None else literal(now)) - older_than
    orphaned = ~exists().where(
        watermarks.c.topic == watermark_samples.c.topic, watermarks.c.partition == watermark_samples.c.partition
    )
    key = (watermark_samples.c.topic, watermark_samples.c.partition, watermark_samples.c.slot)
    doomed = select(*key).where(or_(watermark_samples.c.sampled_at < cutoff, orphaned)).limit(limit)
    return conn.execute(delete(watermark_samples).where(tuple_(*key).in_(doomed))).rowcount
