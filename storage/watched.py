"""The partitions whose watermarks the server reads from Kafka itself: those stored for groups of given prefixes."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, func, or_, select, tuple_

from offsetstore.core.types import TopicPartition
from offsetstore.storage.schema import groups, offsets

__all__ = ["watched_partitions"]


def watched_partitions(
    conn: Connection, prefixes: Sequence[str], after: TopicPartition | None, limit: int
) -> list[TopicPartition]:
    """Up to ``limit`` distinct partitions, in key order after ``after``, stored by live groups of ``prefixes``.

    A caller that pages through them (``after`` = the last one it got, back to None at the end)
    goes round-robin over any number of partitions, ``limit`` at a time.
    """
    if not prefixes:
        return []
    query = (
        select(offsets.c.topic, offsets.c.partition)
        .join(groups, groups.c.group_id == offsets.c.group_id)
        .where(groups.c.deleted_at.is_(None), or_(*(func.starts_with(offsets.c.group_id, p) for p in prefixes)))
        .group_by(offsets.c.topic, offsets.c.partition)
        .order_by(offsets.c.topic, offsets.c.partition)
        .limit(limit)
    )
    if after is not None:
        query = query.where(tuple_(offsets.c.topic, offsets.c.partition) > tuple_(*after))
    return [TopicPartition(r.topic, r.partition) for r in conn.execute(query)]
