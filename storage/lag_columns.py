"""The lag and status columns of a partition, over ``offsets`` outer-joined with ``watermarks``, and the reads built on them.

DescribeGroup (:mod:`.reads`), the group listings and the per-group metrics
(:mod:`.group_metrics`) select these columns in statements of their own: the log end and lag,
the lag in seconds (:mod:`.lag`), the past-log-end anomaly, and the facts that
:mod:`.status` judges (:func:`status_columns`, :func:`facts_of`), with a group's verdict
(:func:`group_verdict`, :func:`group_facts_query` with :class:`VerdictTally`) and the lag history of a page's partitions
(:func:`lag_histories_query`). Expressions and pure functions: :mod:`.describe` runs the queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Integer,
    Join,
    Select,
    Text,
    and_,
    bindparam,
    case,
    false,
    func,
    literal_column,
    null,
    or_,
    select,
    true,
    tuple_,
)

from offsetstore.core.types import EARLIEST, LATEST, NO_OFFSET, ChangeKind
from offsetstore.storage.lag import lag_seconds_of, lag_seconds_status, lag_series
from offsetstore.storage.schema import offset_history, offsets, watermark_samples, watermarks
from offsetstore.storage.status import PartitionFacts, StatusRules, Verdict, judge, worst

# The partition's watermark, read per offset row with one probe of the primary key: a LATERAL
# subquery with a LIMIT is never flattened into a join, so no statistics can make it a hash join
# over every topic's watermarks (a page of 16 read all 10,000 of a store's) or a nested loop
# that scans them per row (a new group of 10,000 partitions with watermarks the statistics had
# not seen yet: 10,000 x 10,000 comparisons, the 10,000-partition description that once needed
# a deadline of 120 s).
WATERMARK = (
    select(
        watermarks.c.topic,
        watermarks.c.partition,
        watermarks.c.log_start_offset,
        watermarks.c.log_end_offset,
        watermarks.c.updated_at,
    )
    .where(watermarks.c.topic == offsets.c.topic, watermarks.c.partition == offsets.c.partition)
    .correlate(offsets)
    .limit(literal_column("1"))
    .lateral("w")
)
_W = WATERMARK.c


def _effective_offset() -> ColumnElement[int]:
    # A sentinel offset resolves to the watermark it stands for.
    return case(
        (offsets.c.offset == EARLIEST, _W.log_start_offset),
        (offsets.c.offset == LATEST, _W.log_end_offset),
        else_=offsets.c.offset,
    )


def lag_columns() -> tuple[ColumnElement[int], ColumnElement[int]]:
    """(log_end_offset, lag) expressions over ``offsets`` outer-joined with ``watermarks``.

    -1 where no log end is known, and where the offset is past it: that is an anomaly
    (see `past_log_end_column`), never lag 0, and a sum over it would mean nothing.
    """
    effective = _effective_offset()
    log_end = func.coalesce(_W.log_end_offset, NO_OFFSET)
    lag = case(
        (or_(_W.log_end_offset.is_(None), effective.is_(None)), NO_OFFSET),
        (effective > _W.log_end_offset, NO_OFFSET),
        else_=_W.log_end_offset - effective,
    )
    return log_end, lag


def lag_seconds_column() -> ColumnElement[float]:
    """Lag in seconds over ``offsets`` outer-joined with ``watermarks`` (see :mod:`.lag`)."""
    return lag_seconds_of(_effective_offset(), WATERMARK)


def past_log_end_column() -> ColumnElement[bool]:
    """Whether the offset is past a log end observed at or after its commit: a confirmed anomaly.

    False where no log end is known, and where the one known is older than the commit: the
    log may have grown past the offset since (a consumer commits before it reports), so that
    is no anomaly until a newer log end says so (storage/status.py calls it UNCONFIRMED).
    """
    return func.coalesce(
        and_(_effective_offset() > _W.log_end_offset, _W.updated_at >= offsets.c.commit_time),
        false(),
    )


def _by_operator(kind: ColumnElement[int]) -> ColumnElement[bool]:
    """Whether a history entry's kind is an operator's write over a consumer's offset (a reset, an adoption).

    Two comparisons, not IN: an IN list would be an expanding parameter, which a statement
    compiled once (:mod:`.describe`) cannot carry.
    """
    return or_(kind == int(ChangeKind.RESET), kind == int(ChangeKind.ADOPT))


#: How far back the history is searched for a partition's latest change (older daily
#: partitions of the history are pruned): an offset unchanged for longer reads as changed then.
HISTORY_LOOKBACK_SECONDS = 86400


def status_columns(window: float | ColumnElement[Any]) -> tuple[ColumnElement[Any], ...]:
    """The columns :func:`facts_of` reads, over ``offsets`` outer-joined with ``watermarks``.

    ``window``: the rules' (:attr:`StatusRules.window`), in seconds, or a bound parameter of it.

    The offset's latest change and its value one window ago come from the history (its index
    on group, topic, partition and id, newest first: each lookup stops at its first row, and
    the day partitions older than :data:`HISTORY_LOOKBACK_SECONDS` are pruned), the log end a
    window ago from the sample ring (at most :data:`~.lag.SAMPLES_KEPT` rows a partition).
    """
    h = offset_history
    now = func.statement_timestamp()
    then = now - func.make_interval(0, 0, 0, 0, 0, 0, window)
    oldest = now - func.make_interval(0, 0, 0, 0, 0, 0, HISTORY_LOOKBACK_SECONDS)
    mine = and_(
        h.c.group_id == offsets.c.group_id,
        h.c.topic == offsets.c.topic,
        h.c.partition == offsets.c.partition,
        h.c.change_time >= oldest,
    )
    moved = func.coalesce(
        select(h.c.change_time).where(mine).order_by(h.c.id.desc()).limit(1).scalar_subquery(), oldest
    )
    # An operator's change last (a reset, an adoption, an import): no consumer's progress. Only
    # then is the consumer's latest commit looked up (CASE evaluates its branch lazily).
    by_operator = func.coalesce(
        select(_by_operator(h.c.kind)).where(mine).order_by(h.c.id.desc()).limit(1).scalar_subquery(), false()
    )
    consumer = select(h.c.change_time).where(mine, h.c.kind == int(ChangeKind.COMMIT)).order_by(h.c.id.desc())
    s = watermark_samples
    return (
        now.label("now"),
        _effective_offset().label("effective_offset"),
        _W.updated_at.label("watermark_time"),
        _W.log_start_offset.label("log_start"),
        _W.log_end_offset.label("log_end"),
        moved.label("moved_time"),
        case((by_operator, moved)).label("reset_time"),
        case((by_operator, consumer.limit(1).scalar_subquery())).label("consumer_time"),
        # The offset a window ago: the latest change up to then, else (unchanged since) the offset;
        # unknown where an operator moved it since, so that its jump never reads as lag growth.
        case(
            # LIMIT 1, not EXISTS: PostgreSQL may plan an EXISTS as a hashed subplan over every
            # group's history of the window (the primary key's range), once per statement: a
            # 16-partition description read the whole history's index.
            (
                select(literal_column("1"))
                .where(mine, h.c.change_time > then, _by_operator(h.c.kind))
                .order_by(h.c.id.desc())
                .limit(literal_column("1"))
                .scalar_subquery()
                .is_not(None),
                null(),
            ),
            else_=func.coalesce(
                select(h.c.new_offset)
                .where(mine, h.c.change_time <= then)
                .order_by(h.c.id.desc())
                .limit(1)
                .scalar_subquery(),
                case((moved <= then, offsets.c.offset)),
            ),
        ).label("offset_then"),
        select(s.c.log_end_offset)
        .where(s.c.topic == offsets.c.topic, s.c.partition == offsets.c.partition, s.c.sampled_at <= then)
        .order_by(s.c.sampled_at.desc())
        .limit(1)
        .scalar_subquery()
        .label("log_end_then"),
    )


def facts_of(r: Any, lag_seconds: float) -> PartitionFacts:
    """The :class:`PartitionFacts` of a row with :func:`status_columns` and ``commit_time``."""
    return PartitionFacts(
        offset=r.effective_offset,
        commit_time=r.commit_time,
        moved_time=r.moved_time,
        log_start=r.log_start,
        log_end=r.log_end,
        watermark_time=r.watermark_time,
        lag_seconds=lag_seconds,
        offset_then=r.offset_then,
        log_end_then=r.log_end_then,
        now=r.now,
        reset_time=r.reset_time,
        consumer_time=r.consumer_time,
    )


def group_verdict(named: Sequence[tuple[str, int, Verdict]]) -> Verdict:
    """The group's verdict: its worst partition's, its reason naming the partition (and how many share it)."""
    if not named:
        return worst(())
    verdict = worst(v for _, _, v in named)
    topic, partition, _ = next(x for x in named if x[2].status == verdict.status)
    others = sum(1 for x in named if x[2].status == verdict.status) - 1
    more = f" (and {others} more partition{'s' if others > 1 else ''})" if others else ""
    return Verdict(verdict.status, f"{topic}:{partition}: {verdict.reason}{more}")


#: How many partitions one statement of a group's verdict reads: the verdict of a huge group
#: is read a chunk at a time in key order (the primary key's range), so that no statement
#: nears the statement timeout and no chunk's rows hold the event loop for long (issue 47).
FACTS_CHUNK = 1000


def group_facts_query(window: float) -> Select[Any]:
    """The columns of the group's verdict over a chunk of its partitions: see :class:`VerdictTally`.

    Parameters: ``group``, and the chunk's start and size: the first ``rows`` partitions after
    (``after_topic``, ``after_partition``) in key order.
    """
    key = tuple_(offsets.c.topic, offsets.c.partition)
    after = tuple_(bindparam("after_topic", type_=Text), bindparam("after_partition", type_=Integer))
    return (
        select(
            offsets.c.topic,
            offsets.c.partition,
            offsets.c.commit_time,
            lag_seconds_column().label("lag_seconds"),
            *status_columns(window),
        )
        .select_from(with_watermarks())
        .where(offsets.c.group_id == bindparam("group", type_=Text), key > after)
        .order_by(offsets.c.topic, offsets.c.partition)
        .limit(bindparam("rows", type_=Integer))
    )


class VerdictTally:
    """:func:`group_verdict` over partitions judged one at a time, in key order: what a chunked read adds up."""

    def __init__(self) -> None:
        self._worst: tuple[str, int, Verdict] | None = None
        self._same = 0

    def add(self, topic: str, partition: int, verdict: Verdict) -> None:
        if self._worst is None or worst((self._worst[2], verdict)) is not self._worst[2]:
            self._worst, self._same = (topic, partition, verdict), 1
        elif verdict.status == self._worst[2].status:
            self._same += 1

    def add_row(self, r: Any, rules: StatusRules) -> None:
        """Adds a row of :func:`group_facts_query`, judged under ``rules``."""
        self.add(r.topic, r.partition, judge(facts_of(r, lag_seconds_status(r.lag_seconds)[0]), rules))

    def verdict(self) -> Verdict:
        if self._worst is None:
            return worst(())
        topic, partition, verdict = self._worst
        others = self._same - 1
        more = f" (and {others} more partition{'s' if others > 1 else ''})" if others else ""
        return Verdict(verdict.status, f"{topic}:{partition}: {verdict.reason}{more}")


def with_watermarks() -> Join:
    """``offsets`` outer-joined with its partitions' watermarks (:data:`WATERMARK`): what every column here reads from."""
    return offsets.outerjoin(WATERMARK, true())


def lag_histories_query() -> Select[Any]:
    """The log end samples of partitions (``topics``, ``partitions``) with ``group``'s offset at each: see :func:`lag_histories_of`.

    The offset at a sample's time is the history's latest change up to it (within
    :data:`HISTORY_LOOKBACK_SECONDS`): at most :data:`~.lag.SAMPLES_KEPT` lookups a partition.
    """
    h, s = offset_history, watermark_samples
    oldest = func.statement_timestamp() - func.make_interval(0, 0, 0, 0, 0, 0, HISTORY_LOOKBACK_SECONDS)
    then = (
        select(h.c.new_offset)
        .where(
            h.c.group_id == bindparam("group", type_=Text),
            h.c.topic == s.c.topic,
            h.c.partition == s.c.partition,
            h.c.change_time <= s.c.sampled_at,
            h.c.change_time >= oldest,
        )
        .order_by(h.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    wanted = (
        func.unnest(bindparam("topics", type_=ARRAY(Text)), bindparam("partitions", type_=ARRAY(Integer)))
        .table_valued("topic", "partition")
        .render_derived(name="k")
    )
    return (
        select(s.c.topic, s.c.partition, s.c.sampled_at, s.c.log_end_offset, then.label("offset_then"))
        .join(wanted, and_(wanted.c.topic == s.c.topic, wanted.c.partition == s.c.partition))
        .order_by(s.c.topic, s.c.partition, s.c.sampled_at)
    )


def lag_histories_of(rows: Sequence[Any]) -> dict[tuple[str, int], list[tuple[datetime, float]]]:
    """Each partition's lag in seconds at each of its log end samples (:func:`~.lag.lag_series`), oldest first."""
    points: dict[tuple[str, int], list[tuple[datetime, int, int | None]]] = {}
    for r in rows:
        offset = r.offset_then if r.offset_then is not None and r.offset_then >= 0 else None
        points.setdefault((r.topic, r.partition), []).append((r.sampled_at, r.log_end_offset, offset))
    return {key: lag_series(found) for key, found in points.items()}
