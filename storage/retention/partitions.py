"""History partitions: one a UTC day, made ahead and dropped whole; stale watermarks dropped with them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import Connection, delete, exists, func, select, text, tuple_

from offsetstore.storage.schema import SCHEMA, offset_history, offsets, watermarks

#: Daily partitions kept made ahead of today (the DEFAULT partition covers a longer lapse).
DAYS_AHEAD = 3

_H = f"{SCHEMA}.{offset_history.name}"
_DEFAULT = "offset_history_default"
_NAME = re.compile(r"offset_history_(p|before_)(\d{8})")


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
    dropped: list[HistoryPartition] = []
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
