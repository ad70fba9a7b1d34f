"""Observed groups: positions a pipeline keeps itself (a Spark checkpoint, a Kafka group), recorded here.

An observed group is never the source of truth: nothing commits to it (``write_batch`` refuses,
outcome 3) and nothing fences it. :func:`observe_offsets` writes only the partitions whose
position changed, each with a history entry of kind OBSERVED and the caller's source, so an
observed group's ``commit_time`` is the time its position last moved: a pipeline that stops
moving reads STOPPED as any group does.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ARRAY, BigInteger, Connection, DateTime, Integer, Text, func, literal, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import GroupCommittedError
from offsetstore.core.types import ChangeKind, OffsetCommit, TopicPartition
from offsetstore.storage import validate as check
from offsetstore.storage._groups import among, now, observed_source, record_changes
from offsetstore.storage.resets import MAX_SOURCE_BYTES
from offsetstore.storage.schema import groups, observed_groups, offsets

# storage/sql/lock_group.sql, creating the group: observing is a first write like a commit.
_LOCK_OR_CREATE = text("SELECT generation, deleted_at, created FROM offsetstore.lock_group(:group_id, true)")


def check_observe(
    group_id: str, positions: Sequence[OffsetCommit], source: str, lost: Sequence[TopicPartition] = ()
) -> None:
    """Raises :class:`InvalidArgumentError` naming every bad field of an ObserveOffsets request."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    check.commits(positions, violations=v)
    observed = {(c.topic, c.partition) for c in positions}
    if len(lost) > check.MAX_PARTITIONS:
        v.add("lost", f"at most {check.MAX_PARTITIONS} partitions in one request")
    else:
        for i, tp in enumerate(lost):
            check.topic(tp.topic, f"lost[{i}].topic", violations=v)
            check.partition(tp.partition, f"lost[{i}].partition", violations=v)
            if (tp.topic, tp.partition) in observed:
                v.add(f"lost[{i}]", "is observed in the same request: a position is either there or lost")
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
    conn: Connection,
    group_id: str,
    positions: Sequence[OffsetCommit],
    *,
    source: str,
    actor: str = "",
    lost: Sequence[TopicPartition] = (),
) -> int:
    """Records a pipeline's positions in the observed group ``group_id``; returns how many changed.

    Creates the group (or revives a deleted one) as observed. A group whose positions are
    committed here is refused with :class:`GroupCommittedError`: observing would overwrite
    what its writers committed. The group's mark keeps the latest ``source``, and how many of
    its stored partitions are in ``lost`` (positions the source no longer has: their last
    observed ones stay here) and since when; a call without ``lost`` clears the flag.
    """
    check_observe(group_id, positions, source, lost)
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
    gone = _stored_count(conn, group_id, lost) if lost else 0
    mark = pg_insert(observed_groups).values(
        group_id=group_id, source=source, lost_partitions=gone, lost_since=func.statement_timestamp() if gone else None
    )
    since = func.coalesce(observed_groups.c.lost_since, func.statement_timestamp()) if gone else None
    conn.execute(
        mark.on_conflict_do_update(
            index_elements=[observed_groups.c.group_id],
            set_={"source": source, "lost_partitions": gone, "lost_since": since},
            # Unchanged marks write nothing (a round that finds nothing new costs a read).
            where=or_(
                observed_groups.c.source != source,
                observed_groups.c.lost_partitions != gone,
            ),
        )
    )
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
    # One statement over arrays (as the history's), not a row each.
    rows = (
        func.unnest(
            literal([c.topic for c in moved], ARRAY(Text)),
            literal([c.partition for c in moved], ARRAY(Integer)),
            literal([c.offset for c in moved], ARRAY(BigInteger)),
            literal([c.metadata for c in moved], ARRAY(Text)),
        )
        .table_valued("topic", "partition", "offset", "metadata")
        .render_derived(with_types=False)
    )
    stmt = pg_insert(offsets).from_select(
        ["group_id", "topic", "partition", "offset", "metadata", "commit_time"],
        select(
            literal(group_id, Text), rows.c.topic, rows.c.partition, rows.c.offset, rows.c.metadata,
            literal(when, DateTime(timezone=True)),
        ),
    )  # fmt: skip
    stmt = stmt.on_conflict_do_update(
        index_elements=[offsets.c.group_id, offsets.c.topic, offsets.c.partition],
        set_={"offset": stmt.excluded.offset, "metadata": stmt.excluded.metadata, "commit_time": when},
    )
    conn.execute(stmt)
    changes = []
    for c in moved:
        tp = TopicPartition(c.topic, c.partition)
        before = stored.get(tp)
        if before is None or before[0] != c.offset:  # history records positions, not metadata
            changes.append((tp, None if before is None else before[0], c.offset))
    record_changes(conn, group_id, changes, ChangeKind.OBSERVED, group.generation, actor, when, source)
    return len(changes)


def _stored_count(conn: Connection, group_id: str, partitions: Sequence[TopicPartition]) -> int:
    """How many of ``partitions`` the group has a position for."""
    pairs = sorted({(tp.topic, tp.partition) for tp in partitions})
    found: int = conn.execute(
        select(func.count()).select_from(offsets).where(offsets.c.group_id == group_id, among(offsets, pairs))
    ).scalar_one()
    return found


def observed_group_ids(conn: Connection, prefixes: Sequence[str], source_prefix: str) -> list[str]:
    """The live observed groups whose ids start with one of ``prefixes`` and whose source starts with ``source_prefix``."""
    starts = or_(*(func.starts_with(observed_groups.c.group_id, p) for p in prefixes))
    rows = conn.execute(
        select(observed_groups.c.group_id)
        .join(groups, groups.c.group_id == observed_groups.c.group_id)
        .where(starts, func.starts_with(observed_groups.c.source, source_prefix), groups.c.deleted_at.is_(None))
        .order_by(observed_groups.c.group_id)
    )
    return [r.group_id for r in rows]
