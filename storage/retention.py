"""Retention: history partitions made ahead and dropped whole, idle groups expired, stale watermarks dropped.

The history (``offset_history``) is range-partitioned by ``change_time``, one partition
a UTC day, named ``offset_history_pYYYYMMDD``; ``offset_history_before_YYYYMMDD`` holds
everything before that day (the history of the store before partitioning) and
``offset_history_default`` catches rows of a day whose partition does not exist yet, so an
insert never fails because maintenance is behind. Retention drops whole partitions: no
DELETE, no vacuum.

A group is idle when neither its ``active_at`` (creation, join, reset) nor any of its
offsets' ``commit_time`` is newer than the retention. Expiry is decided under the group's
row lock, re-checked there, so a commit racing with it is either seen (and the group
kept) or runs after it and brings the group back with its offsets. An expired group keeps
its row as a tombstone with its generation, as a deleted one does.

:class:`Maintenance` runs the rounds in a thread of the server; with several servers on
one database an advisory lock lets one round run at a time. Every DDL statement waits
at most :data:`LOCK_TIMEOUT_MS` for its lock, so a round never stalls commits longer.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import psycopg
import sqlalchemy.exc
from sqlalchemy import Connection, delete, exists, func, select, text, tuple_, update

from offsetstore.core.errors import InvalidArgumentError
from offsetstore.core.types import ChangeKind, ExpiredGroup, TopicPartition
from offsetstore.storage import validate as check
from offsetstore.storage._groups import now, record_changes
from offsetstore.storage.lag import expire_samples
from offsetstore.storage.schema import SCHEMA, groups, offset_history, offsets, watermarks

__all__ = [
    "ACTOR",
    "HistoryPartition",
    "Maintenance",
    "RoundResult",
    "drop_history_before",
    "drop_stale_watermarks",
    "expire_group",
    "history_horizon",
    "history_partitions",
    "idle_groups",
    "make_history_partitions",
    "oldest_history_time",
]

log = logging.getLogger(__name__)

#: The actor of the history entries the server's own retention writes.
ACTOR = "offsetstore"
#: Daily partitions kept made ahead of today (the DEFAULT partition covers a longer lapse).
DAYS_AHEAD = 3
#: Groups expired in one round at most; the rest wait for the next round.
EXPIRE_PER_ROUND = 1000
#: The most groups one ExpireGroups call returns or expires.
EXPIRE_LIMIT = 1000
#: The longest idle time ExpireGroups takes.
MAX_IDLE_FOR = timedelta(days=36525)
#: How long a DDL statement of a round waits for its lock before giving up until the next round.
LOCK_TIMEOUT_MS = 200
#: Key of the advisory lock that lets one server of a database run a round at a time.
MAINTENANCE_LOCK_ID = 0x6F66_6673_6574_0002

_H = f"{SCHEMA}.{offset_history.name}"
_DEFAULT = "offset_history_default"
_NAME = re.compile(r"offset_history_(p|before_)(\d{8})")


# --- history partitions ---------------------------------------------------------------


@dataclass(frozen=True, order=True)
class HistoryPartition:
    """One partition of the history: [lower, upper); ``lower`` None is MINVALUE (everything before)."""

    upper: datetime
    name: str = field(compare=False)
    lower: datetime | None = field(compare=False)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def history_partitions(conn: Connection) -> list[HistoryPartition]:
    """The history's partitions, oldest first, DEFAULT excluded; read from the catalog, bounds from the names."""
    names = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = CAST(:parent AS regclass)"
        ),
        {"parent": _H},
    ).scalars()
    found = []
    for name in names:
        match = _NAME.fullmatch(name)
        if match is None:
            continue
        day = _midnight(datetime.strptime(match[2], "%Y%m%d").date())
        if match[1] == "p":
            found.append(HistoryPartition(day + timedelta(days=1), name, day))
        else:
            found.append(HistoryPartition(day, name, None))
    return sorted(found)


def history_horizon(conn: Connection) -> datetime | None:
    """The oldest instant the history is complete from; None while nothing was ever dropped."""
    parts = history_partitions(conn)
    if not parts or any(p.lower is None for p in parts):
        return None
    return min(p.lower for p in parts if p.lower is not None)


def oldest_history_time(conn: Connection) -> datetime | None:
    """The change time of the oldest kept history entry (by id, through each partition's primary key)."""
    return conn.execute(
        select(offset_history.c.change_time).order_by(offset_history.c.id).limit(1)
    ).scalar_one_or_none()


def make_history_partitions(conn: Connection, today: date, days_ahead: int = DAYS_AHEAD) -> list[str]:
    """Makes the daily partitions of ``today`` and the days ahead that are missing; returns their names.

    Rows of such a day already in the DEFAULT partition move into the new partition in
    the same transaction (PostgreSQL refuses a partition whose rows sit in DEFAULT).
    """
    parts = history_partitions(conn)
    have = {p.name for p in parts}
    # Never overlap the partition of everything before.
    start = max((p.upper for p in parts if p.lower is None), default=_midnight(today))
    made = []
    for n in range(days_ahead + 1):
        lower = _midnight(today + timedelta(days=n))
        name = f"offset_history_p{lower:%Y%m%d}"
        if lower < start or name in have:
            continue
        upper = lower + timedelta(days=1)
        conn.exec_driver_sql(f"CREATE TABLE {SCHEMA}.{name} (LIKE {_H} INCLUDING DEFAULTS)")
        conn.exec_driver_sql(
            f"WITH moved AS (DELETE FROM {SCHEMA}.{_DEFAULT} WHERE change_time >= %(lower)s"
            f" AND change_time < %(upper)s RETURNING *) INSERT INTO {SCHEMA}.{name} SELECT * FROM moved",
            {"lower": lower, "upper": upper},
        )
        conn.exec_driver_sql(
            f"ALTER TABLE {_H} ATTACH PARTITION {SCHEMA}.{name}"
            f" FOR VALUES FROM ('{lower.isoformat()}') TO ('{upper.isoformat()}')"
        )
        made.append(name)
    return made


def drop_history_before(conn: Connection, cutoff: datetime, limit: int = 1) -> list[HistoryPartition]:
    """Drops up to ``limit`` of the oldest partitions that hold nothing at or after ``cutoff``."""
    dropped = []
    for part in history_partitions(conn):
        if part.upper > cutoff or len(dropped) >= limit:
            break
        conn.exec_driver_sql(f"DROP TABLE {SCHEMA}.{part.name}")
        dropped.append(part)
    if not dropped:
        # Rows of days that never had a partition wait in DEFAULT (a few, when maintenance
        # was behind); they age out with the others.
        conn.exec_driver_sql(f"DELETE FROM {SCHEMA}.{_DEFAULT} WHERE change_time < %(cutoff)s", {"cutoff": cutoff})
    return dropped


def drop_stale_watermarks(conn: Connection, older_than: timedelta, limit: int = 10_000) -> int:
    """Drops watermarks nobody reported for ``older_than`` of topics no group has an offset in."""
    stale = (
        select(watermarks.c.topic, watermarks.c.partition)
        .where(
            watermarks.c.updated_at < func.statement_timestamp() - older_than,
            ~exists().where(offsets.c.topic == watermarks.c.topic),
        )
        .limit(limit)
    )
    result = conn.execute(delete(watermarks).where(tuple_(watermarks.c.topic, watermarks.c.partition).in_(stale)))
    return result.rowcount


# --- idle groups ----------------------------------------------------------------------


def _last_active():
    newest_commit = select(func.max(offsets.c.commit_time)).where(offsets.c.group_id == groups.c.group_id)
    return func.greatest(groups.c.active_at, newest_commit.scalar_subquery())


def _idle_query(idle_for: timedelta):
    cutoff = func.statement_timestamp() - idle_for
    partition_count = select(func.count()).where(offsets.c.group_id == groups.c.group_id).scalar_subquery()
    return select(
        groups.c.group_id,
        groups.c.generation,
        partition_count.label("partition_count"),
        _last_active().label("last_active"),
    ).where(
        groups.c.deleted_at.is_(None),
        groups.c.active_at < cutoff,
        ~exists().where(offsets.c.group_id == groups.c.group_id, offsets.c.commit_time >= cutoff),
    )


def _idle_for_problem(idle_for: timedelta) -> str | None:
    if idle_for <= timedelta(0):
        return "must be above zero"
    if idle_for > MAX_IDLE_FOR:
        # Further back than PostgreSQL's timestamps reach is no idle time of any group.
        return "must be at most 100 years"
    return None


def _check_idle_for(idle_for: timedelta) -> None:
    if (problem := _idle_for_problem(idle_for)) is not None:
        raise InvalidArgumentError.field("idle_for", problem)


def idle_groups(
    conn: Connection, idle_for: timedelta, *, prefix: str = "", limit: int = EXPIRE_LIMIT
) -> list[ExpiredGroup]:
    """Live groups with no commit, join or reset for ``idle_for``, longest idle first: what expiry would take."""
    v = check.Violations()
    check.prefix(prefix, violations=v)
    if (problem := _idle_for_problem(idle_for)) is not None:
        v.add("idle_for", problem)
    if not 0 <= limit <= EXPIRE_LIMIT:
        v.add("limit", f"must be between 0 (the default, {EXPIRE_LIMIT}) and {EXPIRE_LIMIT}")
    v.raise_if_any()
    limit = limit or EXPIRE_LIMIT
    query = _idle_query(idle_for).order_by(_last_active(), groups.c.group_id).limit(limit)
    if prefix:
        query = query.where(func.starts_with(groups.c.group_id, prefix))
    return [ExpiredGroup(r.group_id, r.generation, r.partition_count, r.last_active) for r in conn.execute(query)]


def expire_group(conn: Connection, group_id: str, idle_for: timedelta, *, actor: str = ACTOR) -> ExpiredGroup | None:
    """Expires the group if it is still idle for ``idle_for``; None if it is not (or is busy, or gone).

    Removes its offsets, records each as CHANGE_KIND_EXPIRE and leaves the group's row as
    a tombstone. The generation and reset count stay: a writer fenced before stays
    fenced, a rejoin gets a higher generation, and a Spark query keeps its checkpoint
    (its own record of where it is), which is all that is left of its position.
    """
    _check_idle_for(idle_for)
    # The lock every writer of the group takes first. SKIP LOCKED: a group being written
    # right now is not idle, and the round must not wait behind its writer.
    group = conn.execute(
        select(groups.c.generation, groups.c.deleted_at)
        .where(groups.c.group_id == group_id)
        .with_for_update(key_share=True, skip_locked=True)
    ).one_or_none()
    if group is None or group.deleted_at is not None:
        return None
    # Re-checked under the lock, in a snapshot newer than it: a commit that got in first is seen.
    idle = conn.execute(_idle_query(idle_for).where(groups.c.group_id == group_id)).one_or_none()
    if idle is None:
        return None
    rows = conn.execute(
        delete(offsets)
        .where(offsets.c.group_id == group_id)
        .returning(offsets.c.topic, offsets.c.partition, offsets.c.offset)
    ).all()
    conn.execute(update(groups).where(groups.c.group_id == group_id).values(deleted_at=func.statement_timestamp()))
    record_changes(
        conn,
        group_id,
        [(TopicPartition(r.topic, r.partition), r.offset, None) for r in sorted(rows, key=lambda r: r[:2])],
        ChangeKind.EXPIRE,
        group.generation,
        actor,
        now(conn),
    )
    log.info(
        "group expired",
        extra={
            "group": group_id,
            "partitions": len(rows),
            "generation": group.generation,
            "last_active": idle.last_active.isoformat(),
            "actor": actor,
        },
    )
    return ExpiredGroup(group_id, group.generation, len(rows), idle.last_active)


# --- the maintenance loop ----------------------------------------------------------------


@dataclass
class RoundResult:
    """What one maintenance round did."""

    made: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    watermarks: int = 0
    #: Steps that found their lock taken and were left for the next round.
    deferred: list[str] = field(default_factory=list)


def _lock_unavailable(error: BaseException) -> bool:
    return isinstance(getattr(error, "orig", None), psycopg.errors.LockNotAvailable)


class Maintenance:
    """Runs maintenance rounds every ``interval`` seconds in a thread; :meth:`run_once` runs one now.

    ``store`` is the server's :class:`~offsetstore.storage.store.Store`: expiry goes through
    it (one transaction per group, counted by its hook), DDL through its engine.
    """

    def __init__(
        self,
        store,
        *,
        history_retention: float,
        offsets_retention: float,
        interval: float = 60.0,
        metrics=None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.history_retention = history_retention
        self.offsets_retention = offsets_retention
        self.interval = interval
        self.metrics = metrics
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="offsetstore-maintenance", daemon=True)

    def start(self) -> Maintenance:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while True:
            try:
                self.run_once()
            except Exception:
                # The database may be away; the next round tries again.
                log.exception("maintenance round failed")
            if self._stop.wait(self.interval):
                return

    def _ddl(self, step: str, result: RoundResult, operation: Callable[[Connection], list]) -> list:
        try:
            with self.store.engine.begin() as conn:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
                return operation(conn)
        except sqlalchemy.exc.DBAPIError as error:
            if not _lock_unavailable(error):
                raise
            result.deferred.append(step)
            log.info("maintenance step deferred: its lock is busy", extra={"step": step})
            return []

    def run_once(self) -> RoundResult | None:
        """One round; None when another server of the database is running one."""
        self._observe_oldest()
        with self.store.engine.connect() as lock_conn:
            got = lock_conn.execute(select(func.pg_try_advisory_lock(MAINTENANCE_LOCK_ID))).scalar_one()
            lock_conn.commit()
            if not got:
                log.debug("maintenance round skipped: another server runs it")
                return None
            try:
                started = time.perf_counter()
                result = self._round()
                seconds = time.perf_counter() - started
                if self.metrics is not None:
                    self.metrics.maintenance_seconds.observe(seconds)
            finally:
                lock_conn.execute(select(func.pg_advisory_unlock(MAINTENANCE_LOCK_ID)))
                lock_conn.commit()
        self._observe_oldest()
        log.info(
            "maintenance round",
            extra={
                "partitions_made": len(result.made),
                "partitions_dropped": len(result.dropped),
                "groups_expired": len(result.expired),
                "watermarks_dropped": result.watermarks,
                "deferred": result.deferred,
                "ms": round(seconds * 1000, 1),
            },
        )
        return result

    def _round(self) -> RoundResult:
        result = RoundResult()
        now = self.clock()
        result.made = self._ddl("make partitions", result, lambda c: make_history_partitions(c, now.date()))
        for name in result.made:
            log.info("history partition made", extra={"partition": name})
        if self.history_retention > 0:
            cutoff = now - timedelta(seconds=self.history_retention)
            # One partition a transaction: each DROP holds the table's lock only for itself.
            while True:
                dropped = self._ddl("drop partitions", result, lambda c: drop_history_before(c, cutoff))
                if not dropped:
                    break
                for part in dropped:
                    log.info(
                        "history partition dropped",
                        extra={"partition": part.name, "before": part.upper.isoformat()},
                    )
                    result.dropped.append(part.name)
            retention = timedelta(seconds=self.history_retention)
            result.watermarks = self.store.run(drop_stale_watermarks, retention)
            if result.watermarks:
                log.info("stale watermarks dropped", extra={"watermarks": result.watermarks})
            # After the watermarks: their samples go with them (and any older than the retention).
            samples = self.store.run(expire_samples, retention)
            if samples:
                log.info("watermark samples dropped", extra={"samples": samples})
        if self.offsets_retention > 0:
            idle_for = timedelta(seconds=self.offsets_retention)
            expired = self.store.expire_groups(idle_for, limit=EXPIRE_PER_ROUND, execute=True, actor=ACTOR)
            result.expired = [g.group_id for g in expired]
        return result

    def _observe_oldest(self) -> None:
        if self.metrics is None:
            return
        try:
            oldest = self.store.run(oldest_history_time)
        except Exception:
            log.warning("cannot read the oldest history time", exc_info=True)
            return
        self.metrics.oldest_history = oldest
