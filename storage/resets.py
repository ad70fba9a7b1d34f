"""Operator actions: reset and delete a group's offsets, fencing its live writers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import cast

from sqlalchemy import (
    Connection,
    delete,
    select,
)
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import (
    FieldViolation,
    InvalidArgumentError,
)
from offsetstore.core.types import (
    EARLIEST,
    LATEST,
    Boundary,
    ChangeKind,
    OffsetChange,
    OffsetOutOfRange,
    ResetRequest,
    ResetResult,
    TopicPartition,
)
from offsetstore.storage import validate as check
from offsetstore.storage._groups import (
    SelectionArg,
    bump_generation,
    lock_group,
    now,
    observed_error,
    observed_source,
    or_no_offset,
    record_changes,
    stale_error,
    unobserve,
    where_selected,
)
from offsetstore.storage.clusters import bound_cluster, forget, rebind_cluster
from offsetstore.storage.retention import history_horizon
from offsetstore.storage.schema import offset_history, offsets
from offsetstore.storage.watermarks import read_watermarks

#: The longest ``source`` of an adoption, in bytes.
MAX_SOURCE_BYTES = 1024
# The longest Kafka cluster id a switch takes: the same bound as a join's (validate.py).
MAX_CLUSTER_ID_BYTES = check.MAX_CLUSTER_ID_BYTES

# --- operator actions: reset and delete --------------------------------------------


def _selection_required(sels: list[check.Selection], all_topics: bool, v: check.Violations) -> None:
    if sels and all_topics:
        v.add("all_topics", "give either topics or all_topics, not both")
    # A selection that was given but is bad has been named already.
    if not sels and not all_topics and not any(f.field.startswith("topics") for f in v.found):
        v.add("topics", "name topics or set all_topics")


def _offsets_at(
    conn: Connection, group_id: str, sels: list[check.Selection], instant: datetime
) -> dict[TopicPartition, int | None]:
    """Each partition's offset as of ``instant`` from the history (None: it had none then).

    Where retention dropped old history, an instant before what is kept is
    INVALID_ARGUMENT naming the oldest one that can be restored; from that one on, a
    partition whose last change before ``instant`` was dropped has the offset its next
    change started from, or, changed since by nothing, the one it has now.
    """
    h = offset_history
    latest = (
        select(h.c.topic, h.c.partition, h.c.new_offset)
        .ext(distinct_on(h.c.topic, h.c.partition))
        .where(h.c.group_id == group_id, h.c.change_time <= instant, where_selected(h, sels))
        .order_by(h.c.topic, h.c.partition, h.c.id.desc())
    )
    found = {TopicPartition(r.topic, r.partition): r.new_offset for r in conn.execute(latest)}
    horizon = history_horizon(conn)
    if horizon is None:
        return found  # the whole history is kept: no change before the instant means no offset then
    if instant < horizon:
        oldest = horizon.isoformat().replace("+00:00", "Z")
        raise InvalidArgumentError(
            f"to_commit_time: is older than the kept history; the oldest instant that can be restored is {oldest}",
            violations=[
                FieldViolation("to_commit_time", f"is older than the oldest instant that can be restored, {oldest}")
            ],
            metadata={"oldest_restorable_time": oldest},
        )
    following = (
        select(h.c.topic, h.c.partition, h.c.previous_offset)
        .ext(distinct_on(h.c.topic, h.c.partition))
        .where(h.c.group_id == group_id, h.c.change_time > instant, where_selected(h, sels))
        .order_by(h.c.topic, h.c.partition, h.c.id)
    )
    for r in conn.execute(following):
        found.setdefault(TopicPartition(r.topic, r.partition), r.previous_offset)
    unchanged = select(offsets.c.topic, offsets.c.partition, offsets.c.offset).where(
        offsets.c.group_id == group_id, where_selected(offsets, sels)
    )
    for r in conn.execute(unchanged):
        found.setdefault(TopicPartition(r.topic, r.partition), r.offset)
    return found


def reset_offsets(
    conn: Connection,
    group_id: str | ResetRequest,
    topics: SelectionArg = None,
    *,
    all_topics: bool = False,
    to_offset: int | None = None,
    shift_by: int | None = None,
    to_boundary: Boundary | None = None,
    to_commit_time: datetime | None = None,
    dry_run: bool = False,
    expected_generation: int | None = None,
    clamp: bool = False,
    actor: str = "",
    to_offsets: Mapping[TopicPartition, int] | None = None,
    source: str = "",
    switch_to_cluster_id: str = "",
) -> ResetResult:
    """The operator's reset of a selection to one target; bumps the generation unless ``dry_run``.

    The request is a :class:`ResetRequest` (the server's), or spelled as keywords (the storage
    core's callers). Returns every selected partition with its previous and new offset (-1: none).
    """
    request = (
        group_id
        if isinstance(group_id, ResetRequest)
        else ResetRequest(
            group_id,
            topics,
            all_topics,
            to_offset,
            shift_by,
            to_boundary,
            to_commit_time,
            dry_run,
            expected_generation,
            clamp,
            to_offsets,
            source,
            switch_to_cluster_id,
        )
    )
    to_offsets, source = request.to_offsets, request.source
    switch_to = request.switch_to_cluster_id
    # The server's requests carry (topic, partitions) pairs; a client's Topics forms are checked the same way.
    group_id, topics, all_topics = request.group_id, cast(SelectionArg, request.topics), request.all_topics
    to_offset, shift_by, to_boundary = request.to_offset, request.shift_by, request.to_boundary
    to_commit_time, dry_run = request.to_commit_time, request.dry_run
    expected = request.expected_generation
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    _selection_required(sels, all_topics, v)
    targets = [t for t in (to_offset, shift_by, to_boundary, to_commit_time, to_offsets) if t is not None]
    if len(targets) != 1:
        v.add("target", "give exactly one of to_offset, shift_by, to_boundary, to_commit_time, to_offsets")
    if to_offsets is not None:
        _check_offset_targets(to_offsets, sels, all_topics, v)
    check.text(source, "source", MAX_SOURCE_BYTES, violations=v)  # a NUL would fail in the driver, as INTERNAL
    check.text(switch_to, "switch_to_cluster_id", MAX_CLUSTER_ID_BYTES, violations=v)
    if to_offset is not None and not 0 <= to_offset <= check.INT64_MAX:
        v.add("to_offset", "must be >= 0")
    if to_boundary is not None and to_boundary not in (Boundary.EARLIEST, Boundary.LATEST):
        v.add("to_boundary", "must be BOUNDARY_EARLIEST or BOUNDARY_LATEST")
    if expected is not None and not 0 <= expected <= check.INT64_MAX:
        v.add("expected_generation", "must be >= 0")
    v.raise_if_any()

    group = lock_group(conn, group_id)
    # Decided under the group's lock: a confirm applies only to the state its preview showed.
    current = group.generation if group is not None else 0
    if expected is not None and expected != current:
        raise stale_error(group_id, expected, current)
    observed = observed_source(conn, group_id) if group is not None else None
    if observed is not None and not dry_run and (switch_to or not source):
        # An observed group's positions are its pipeline's: only an adoption takes them over
        # (and makes it a committed group); a dry run shows positions to restart from. A switch
        # moves a committed group's positions: an observed group is adopted first.
        raise observed_error(group_id, observed)
    kind = ChangeKind.ADOPT if source else ChangeKind.RESET
    if switch_to:
        # Both ids in the history, so the switch can be read back and undone from it.
        left = (bound_cluster(conn, group_id) if group is not None else None) or "(none)"
        kind, source = (
            ChangeKind.SWITCH,
            f"switch from cluster {left} to {switch_to}" + (f": {source}" if source else ""),
        )
    stored = {
        TopicPartition(r.topic, r.partition): r.offset
        for r in conn.execute(
            select(offsets.c.topic, offsets.c.partition, offsets.c.offset).where(
                offsets.c.group_id == group_id, where_selected(offsets, sels)
            )
        )
    }
    # Explicitly named partitions are selected even without an offset; a whole topic
    # means the partitions the group has (and, for a point in time, had).
    selected: set[TopicPartition] = set(stored)
    selected.update(TopicPartition(t, p) for t, parts in sels for p in parts)
    past: dict[TopicPartition, int | None] = {}
    if to_commit_time is not None:
        past = _offsets_at(conn, group_id, sels, to_commit_time)
        selected.update(tp for tp, off in past.items() if off is not None)
    marks = read_watermarks(conn, selected)

    new: dict[TopicPartition, int] = {}
    outside: list[OffsetOutOfRange] = []
    for tp in sorted(selected):
        old = stored.get(tp)
        start, end = marks.get(tp, (None, None))
        boundary = to_boundary
        if to_offsets is not None and to_offsets.get(tp, 0) < 0:
            boundary = Boundary.EARLIEST if to_offsets[tp] == EARLIEST else Boundary.LATEST
        if to_offset is not None:
            new[tp] = to_offset
        elif to_offsets is not None and boundary is None:
            new[tp] = to_offsets[tp]
        elif boundary is not None:
            if boundary == Boundary.EARLIEST:
                new[tp] = EARLIEST if start is None else start
            else:
                new[tp] = LATEST if end is None else end
        elif shift_by is not None:
            base = {EARLIEST: start, LATEST: end}.get(old, old) if old is not None else None
            if base is None:
                continue  # nothing to shift from: no offset, or a sentinel with no watermark
            moved = min(max(0, base + shift_by), check.INT64_MAX)
            new[tp] = min(moved, end) if end is not None else moved
        else:
            # A reset never deletes: no offset at that instant means "from the start".
            at = past.get(tp)
            new[tp] = EARLIEST if at is None else at
        # A boundary resolves to a bound by itself; any other offset may lie outside them.
        bound = None if boundary is not None or tp not in new else _passed_bound(new[tp], start, end)
        if bound is not None:
            outside.append(OffsetOutOfRange(tp.topic, tp.partition, new[tp], bound, request.clamp))
            if request.clamp:
                new[tp] = bound

    generation = current
    # A reset of a live group always fences its writers; an unknown or deleted group
    # is (re)created only when the reset gives it an offset.
    live = group is not None and group.deleted_at is None
    bumps = live or bool(new)
    after = generation + 1 if bumps else generation
    changes = [
        OffsetChange(tp.topic, tp.partition, or_no_offset(stored.get(tp)), off, kind, after, None, actor, source)
        for tp, off in new.items()
    ]
    if dry_run:
        return ResetResult(changes, generation, True, outside)
    if bumps:
        generation = bump_generation(conn, group_id)
        if expected is not None and generation != current + 1:
            # A group unknown above has no row to lock: one created meanwhile (a join that
            # committed while this insert waited for it) moved it past what was expected.
            raise stale_error(group_id, expected, generation - 1)
    if observed is not None:
        unobserve(conn, group_id)  # adopted: a committed group from now on
    when = _apply_reset(conn, group_id, new, stored, generation, actor, kind, source)
    if switch_to and bumps:
        rebind_cluster(conn, group_id, switch_to)
    return ResetResult([replace(c, change_time=when) for c in changes], generation, False, outside)


def _check_offset_targets(
    to_offsets: Mapping[TopicPartition, int], sels: list[check.Selection], all_topics: bool, v: check.Violations
) -> None:
    """``to_offsets``: valid partitions and offsets, and exactly the partitions ``topics`` names.

    The selection repeats them so that what a call costs and may add (counted from ``topics``
    before the request runs) is what it writes.
    """
    if not to_offsets:
        v.add("to_offsets", "give at least one partition's offset")
    for i, (tp, off) in enumerate(sorted(to_offsets.items())):
        check.topic(tp.topic, field=f"to_offsets.offsets[{i}].topic", violations=v)
        check.partition(tp.partition, field=f"to_offsets.offsets[{i}].partition", violations=v)
        if not (off in (EARLIEST, LATEST) or 0 <= off <= check.INT64_MAX):
            v.add(f"to_offsets.offsets[{i}].offset", "must be >= 0, or -2 (earliest) or -1 (latest)")
    named = {TopicPartition(t, p) for t, parts in sels for p in parts}
    whole = any(not parts for _, parts in sels)
    if all_topics or whole or named != set(to_offsets):
        v.add("topics", "with to_offsets, name exactly its partitions (the clients fill this in)")


def _passed_bound(offset: int, start: int | None, end: int | None) -> int | None:
    """The known log bound that ``offset`` lies beyond (start below, end above), or None; placeholders pass none."""
    if offset < 0:
        return None
    if end is not None and end >= 0 and offset > end:
        return end
    if start is not None and start >= 0 and offset < start:
        return start
    return None


def _apply_reset(
    conn: Connection,
    group_id: str,
    new: dict[TopicPartition, int],
    stored: dict[TopicPartition, int],
    generation: int,
    actor: str,
    kind: ChangeKind,
    source: str,
) -> datetime:
    """Writes the reset's offsets and history; returns the time it records."""
    when = now(conn)
    if new:
        stmt = pg_insert(offsets)
        stmt = stmt.on_conflict_do_update(
            index_elements=[offsets.c.group_id, offsets.c.topic, offsets.c.partition],
            set_={"offset": stmt.excluded.offset, "metadata": "", "commit_time": stmt.excluded.commit_time},
        )
        conn.execute(
            stmt,
            [
                {
                    "group_id": group_id,
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": off,
                    "metadata": "",
                    "commit_time": when,
                }
                for tp, off in new.items()
            ],
        )
    record_changes(
        conn,
        group_id,
        [(tp, stored.get(tp), off) for tp, off in new.items()],
        kind,
        generation,
        actor,
        when,
        source,
    )
    return when


def delete_offsets(
    conn: Connection, group_id: str, topics: SelectionArg = None, *, all_topics: bool = False, actor: str = ""
) -> list[TopicPartition]:
    """Deletes the selected offsets; ``all_topics`` deletes the group. Recorded in the history.

    Like a reset, a delete fences live writers (the generation moves on) so that they
    cannot silently recreate what an operator removed.
    """
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    _selection_required(sels, all_topics, v)
    v.raise_if_any()
    group = lock_group(conn, group_id)
    if group is None or group.deleted_at is not None:
        return []
    rows = conn.execute(
        delete(offsets)
        .where(offsets.c.group_id == group_id, where_selected(offsets, sels))
        .returning(offsets.c.topic, offsets.c.partition, offsets.c.offset)
    ).all()
    deleted = sorted(TopicPartition(r.topic, r.partition) for r in rows)
    # Like a reset, the delete moves the generation on (and the reset count, so a Spark
    # query restarts on a fresh checkpoint). Deleting the group keeps its row as a
    # tombstone: the generation of a group id never repeats.
    if not (all_topics or rows):
        return []
    generation = bump_generation(conn, group_id, deleted=all_topics)
    if all_topics:  # a deleted group's id is free to be committed, observed or bound anew
        unobserve(conn, group_id)
    forget(conn, group_id, None if all_topics else [TopicPartition(r.topic, r.partition) for r in rows])
    record_changes(
        conn,
        group_id,
        [
            (TopicPartition(r.topic, r.partition), r.offset, None)
            for r in sorted(rows, key=lambda r: (r.topic, r.partition))
        ],
        ChangeKind.DELETE,
        generation,
        actor,
        now(conn),
    )
    return deleted
