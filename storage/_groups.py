"""The group row and its history: the write lock, generation bumps, history rows, selections of partitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Connection,
    Integer,
    Row,
    Text,
    any_,
    bindparam,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import (
    StaleGenerationError,
)
from offsetstore.core.types import (
    NO_OFFSET,
    ChangeKind,
    TopicPartition,
)
from offsetstore.storage import validate as check
from offsetstore.storage.schema import groups, offset_history

# --- statements built once; SQLAlchemy caches their compiled form ---------------

#: Which partitions an operation applies to: topic -> partitions (none: the whole topic), or pairs.
SelectionArg = Mapping[str, Iterable[int]] | Iterable[tuple[str, Iterable[int]]] | None

_GROUP_FOR_WRITE = (
    select(groups.c.generation, groups.c.deleted_at)
    .where(groups.c.group_id == bindparam("group_id"))
    # NO KEY UPDATE: conflicts with every other writer of the group, not with readers.
    .with_for_update(key_share=True)
)


def among(table, pairs: Sequence[tuple[str, int]]) -> ColumnElement[bool]:
    """(topic, partition) is one of ``pairs``, as two array parameters.

    A row-value IN list of thousands of pairs exhausts PostgreSQL's stack; unnest does not.
    """
    rows = (
        func.unnest(literal([t for t, _ in pairs], ARRAY(Text)), literal([p for _, p in pairs], ARRAY(Integer)))
        .table_valued("topic", "partition")
        .render_derived(with_types=False)
    )
    return tuple_(table.c.topic, table.c.partition).in_(select(rows.c.topic, rows.c.partition))


def where_selected(table, sels: Sequence[check.Selection]) -> ColumnElement[bool]:
    if not sels:
        return true()
    whole = [t for t, parts in sels if not parts]
    pairs = [(t, p) for t, parts in sels for p in parts]
    clauses = []
    if whole:
        clauses.append(table.c.topic == any_(literal(whole, ARRAY(Text))))
    if pairs:
        clauses.append(among(table, pairs))
    return or_(*clauses)


def lock_group(conn: Connection, group_id: str, *, create: bool) -> Row | None:
    """Locks the group's row for writing and returns its (generation, deleted_at); None: never seen.

    ``create`` is for writes that give the group offsets: they create the row, or bring a
    deleted group's tombstone back to life with the generation it had.
    """
    row = conn.execute(_GROUP_FOR_WRITE, {"group_id": group_id}).one_or_none()
    if row is None and create:
        conn.execute(pg_insert(groups).values(group_id=group_id).on_conflict_do_nothing())
        row = conn.execute(_GROUP_FOR_WRITE, {"group_id": group_id}).one()
    if row is not None and create and row.deleted_at is not None:
        conn.execute(update(groups).where(groups.c.group_id == group_id).values(deleted_at=None))
    return row


def or_no_offset(offset: int | None) -> int:
    return NO_OFFSET if offset is None else offset


def stale_error(group_id: str, requested: int, current: int) -> StaleGenerationError:
    return StaleGenerationError(
        f"generation {requested} of group {group_id!r} is stale; the current generation is {current}",
        metadata={"group_id": group_id, "current_generation": str(current), "generation": str(requested)},
    )


def check_generation(group_id: str, requested: int, current: int) -> None:
    if requested != 0 and requested != current:
        raise stale_error(group_id, requested, current)


def bump_generation(conn: Connection, group_id: str, *, deleted: bool = False) -> int:
    """Moves the generation on and counts a reset; ``deleted`` leaves the group as a tombstone."""
    deleted_at = func.statement_timestamp() if deleted else None
    stmt = pg_insert(groups).values(group_id=group_id, generation=1, reset_count=1, deleted_at=deleted_at)
    stmt = stmt.on_conflict_do_update(
        index_elements=[groups.c.group_id],
        set_={
            "generation": groups.c.generation + 1,
            "reset_count": groups.c.reset_count + 1,
            "deleted_at": deleted_at,
            "active_at": func.statement_timestamp(),
        },
    ).returning(groups.c.generation)
    return conn.execute(stmt).scalar_one()


def now(conn: Connection) -> datetime:
    # The wall clock now, not the transaction's start: the change becomes visible at COMMIT.
    return conn.execute(select(func.clock_timestamp())).scalar_one()


def record_changes(
    conn: Connection,
    group_id: str,
    changes: Sequence[tuple[TopicPartition, int | None, int | None]],
    kind: ChangeKind,
    generation: int,
    actor: str,
    when: datetime,
) -> None:
    if not changes:
        return
    conn.execute(
        offset_history.insert(),
        [
            {
                "group_id": group_id,
                "topic": tp.topic,
                "partition": tp.partition,
                "previous_offset": before,
                "new_offset": after,
                "kind": int(kind),
                "generation": generation,
                "change_time": when,
                "actor": actor,
            }
            for tp, before, after in changes
        ],
    )
