"""Expiry of idle groups: found by their last commit, join or reset, expired under the group's lock."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Connection, Select, delete, exists, func, select, update

from offsetstore.core.errors import InvalidArgumentError
from offsetstore.core.types import ChangeKind, ExpiredGroup, TopicPartition
from offsetstore.storage import validate as check
from offsetstore.storage._groups import now, record_changes, unobserve
from offsetstore.storage.schema import groups, offsets

log = logging.getLogger(__name__)

#: The actor of the history entries the server's own retention writes.
ACTOR = "offsetstore"
#: The most groups one ExpireGroups call returns or expires.
EXPIRE_LIMIT = 1000
#: The longest idle time ExpireGroups takes.
MAX_IDLE_FOR = timedelta(days=36525)


def _last_active() -> ColumnElement[datetime]:
    newest_commit = select(func.max(offsets.c.commit_time)).where(offsets.c.group_id == groups.c.group_id)
    return func.greatest(groups.c.active_at, newest_commit.scalar_subquery())


def _idle_query(idle_for: timedelta) -> Select[tuple[str, int, int, datetime]]:
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
    unobserve(conn, group_id)
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
