"""Observed groups: positions a pipeline keeps itself (a Spark checkpoint, a Kafka group), recorded here.

An observed group is never the source of truth: nothing commits to it (``write_batch`` refuses,
outcome 3) and nothing fences it. :func:`observe_offsets` writes only the partitions whose
position changed, each with a history entry of kind OBSERVED and the caller's source, so an
observed group's ``commit_time`` is the time its position last moved: a pipeline that stops
moving reads STOPPED as any group does.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import GroupCommittedError
from offsetstore.core.types import ChangeKind, OffsetCommit, TopicPartition
from offsetstore.storage import validate as check
from offsetstore.storage._groups import among, now, observed_source, record_changes
from offsetstore.storage.resets import MAX_SOURCE_BYTES
from offsetstore.storage.schema import groups, observed_groups, offsets

# storage/sql/lock_group.sql, creating the group: observing is a first write like a commit.
_LOCK_OR_CREATE = text("SELECT generation, deleted_at, created FROM offsetstore.lock_group(:group_id, true)")


def check_observe(group_id: str, positions: Sequence[OffsetCommit], source: str) -> None:
    """Raises :class:`InvalidArgumentError` naming every bad field of an ObserveOffsets request."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    check.commits(positions, violations=v)
    for i, c in enumerate(positions):
        if c.expected_offset is not None:
            v.add(f"offsets[{i}].expected_offset", "must be unset: an observed position is never a compare-and-set")
            break
    if not source:
        v.add("source", "must name where the positions were read, e.g. spark:<query id> or kafka:<cluster>/<group>")
    else:
        check.text(source, "source", MAX_SOURCE_BYTES, violations=v)
    v.raise_if_any()


def observe_offsets(
    conn: Connection, group_id: str, positions: Sequence[OffsetCommit], *, source: str, actor: str = ""
) -> int:
    """Records a pipeline's positions in the observed group ``group_id``; returns how many changed.

    Creates the group (or revives a deleted one) as observed. A group whose positions are
    committed here is refused with :class:`GroupCommittedError`: observing would overwrite
    what its writers committed. The group's mark keeps the latest ``source``.
    """
    check_observe(group_id, positions, source)
    group = conn.execute(_LOCK_OR_CREATE, {"group_id": group_id}).one()
    live = group.deleted_at is None and not group.created
    observed = observed_source(conn, group_id)
    if live and observed is None:
        raise GroupCommittedError(
            f"group {group_id!r} is committed to offsetstore: observing would overwrite its positions;"
            " observe the pipeline under another group id",
            metadata={"group_id": group_id},
        )
    if group.deleted_at is not None:  # a deleted group comes back, observed, with the generation its id kept
        conn.execute(update(groups).where(groups.c.group_id == group_id).values(deleted_at=None))
    if observed != source:
        mark = pg_insert(observed_groups).values(group_id=group_id, source=source)
        conn.execute(mark.on_conflict_do_update(index_elements=[observed_groups.c.group_id], set_={"source": source}))
    if not positions:
        return 0
    pairs = [(c.topic, c.partition) for c in positions]
    stored = {
        TopicPartition(r.topic, r.partition): (r.offset, r.metadata)
        for r in conn.execute(
            select(offsets.c.topic, offsets.c.partition, offsets.c.offset, offsets.c.metadata).where(
                offsets.c.group_id == group_id, among(offsets, pairs)
            )
        )
    }
    moved = [c for c in positions if stored.get(TopicPartition(c.topic, c.partition)) != (c.offset, c.metadata)]
    if not moved:
        return 0
    when = now(conn)
    stmt = pg_insert(offsets)
    stmt = stmt.on_conflict_do_update(
        index_elements=[offsets.c.group_id, offsets.c.topic, offsets.c.partition],
        set_={"offset": stmt.excluded.offset, "metadata": stmt.excluded.metadata, "commit_time": when},
    )
    conn.execute(
        stmt,
        [
            {
                "group_id": group_id,
                "topic": c.topic,
                "partition": c.partition,
                "offset": c.offset,
                "metadata": c.metadata,
                "commit_time": when,
            }
            for c in moved
        ],
    )
    changes = []
    for c in moved:
        tp = TopicPartition(c.topic, c.partition)
        before = stored.get(tp)
        if before is None or before[0] != c.offset:  # history records positions, not metadata
            changes.append((tp, None if before is None else before[0], c.offset))
    record_changes(conn, group_id, changes, ChangeKind.OBSERVED, group.generation, actor, when, source)
    return len(changes)
