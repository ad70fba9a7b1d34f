"""The partitions whose watermarks the server reads from Kafka itself: those stored for groups of given prefixes, a share per group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, Integer, Text, bindparam, func, or_, select, true, tuple_
from sqlalchemy.dialects.postgresql import ARRAY

from offsetstore.core.types import TopicPartition
from offsetstore.storage.schema import groups, offsets

__all__ = ["watched_groups", "watched_partitions_of"]


def watched_groups(conn: Connection, prefixes: Sequence[str], after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` live groups of ``prefixes`` in id order after ``after``.

    A caller that pages through them (``after`` = the last one it got, back to None at the end)
    goes round-robin over any number of groups, ``limit`` at a time.
    """
    if not prefixes:
        return []
    query = (
        select(groups.c.group_id)
        .where(groups.c.deleted_at.is_(None), or_(*(func.starts_with(groups.c.group_id, p) for p in prefixes)))
        .order_by(groups.c.group_id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(groups.c.group_id > after)
    return list(conn.execute(query).scalars())


def watched_partitions_of(
    conn: Connection, group_ids: Sequence[str], after: Mapping[str, TopicPartition], share: int
) -> dict[str, list[TopicPartition]]:
    """Each group's next ``share`` partitions in key order after its own ``after`` (from its start without one).

    ONE statement: a primary-key range per group, so that a group of a million partitions
    costs a round ``share`` of them, as a group of ten does (issue 47: fairness per group).
    """
    if not group_ids:
        return {}
    cursors = (
        func.unnest(
            bindparam("groups", list(group_ids), type_=ARRAY(Text)),
            bindparam("topics", [after[g].topic if g in after else "" for g in group_ids], type_=ARRAY(Text)),
            bindparam(
                "partitions", [after[g].partition if g in after else -1 for g in group_ids], type_=ARRAY(Integer)
            ),
        )
        .table_valued("group_id", "topic", "partition")
        .render_derived(name="c")
    )
    page = (
        select(offsets.c.topic, offsets.c.partition)
        .where(
            offsets.c.group_id == cursors.c.group_id,
            tuple_(offsets.c.topic, offsets.c.partition) > tuple_(cursors.c.topic, cursors.c.partition),
        )
        .order_by(offsets.c.topic, offsets.c.partition)
        .limit(share)
        .lateral("p")
    )
    found: dict[str, list[TopicPartition]] = {g: [] for g in group_ids}
    query = select(cursors.c.group_id, page.c.topic, page.c.partition).select_from(cursors.join(page, true()))
    for r in conn.execute(query.order_by(cursors.c.group_id, page.c.topic, page.c.partition)):
        found[r.group_id].append(TopicPartition(r.topic, r.partition))
    return found
