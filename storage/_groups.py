"""The group row and its history: the write lock, generation bumps, history rows, selections of partitions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Connection,
    DateTime,
    Integer,
    Row,
    SmallInteger,
    Table,
    Text,
    any_,
    delete,
    func,
    literal,
    or_,
    select,
    text,
    true,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import (
    GroupObservedError,
    StaleGenerationError,
)
from offsetstore.core.types import (
    NO_OFFSET,
    ChangeKind,
    TopicPartition,
)
from offsetstore.storage import validate as check
from offsetstore.storage.schema import groups, observed_groups, offset_history

# --- statements built once; SQLAlchemy caches their compiled form ---------------

#: Which partitions an operation applies to: topic -> partitions (none: the whole topic), or pairs.
SelectionArg = Mapping[str, Iterable[int]] | Iterable[tuple[str, Iterable[int]]] | None

# storage/sql/lock_group.sql: the one lock of every write; the commit path takes it inside write_batch.
_LOCK_GROUP = text("SELECT generation, deleted_at FROM offsetstore.lock_group(:group_id, false)")


def among(table: Table, pairs: Sequence[tuple[str, int]]) -> ColumnElement[bool]:
    """(topic, partition) is one of ``pairs``, as two array parameters.

    A row-value IN list of thousands of pairs exhausts PostgreSQL's stack; unnest does not.
    """
    rows = (
        func.unnest(literal([t for t, _ in pairs], ARRAY(Text)), literal([p for _, p in pairs], ARRAY(Integer)))
        .table_valued("topic", "partition")
        .render_derived(with_types=False)
    )
    return tuple_(table.c.topic, table.c.partition).in_(select(rows.c.topic, rows.c.partition))


def where_selected(table: Table, sels: Sequence[check.Selection]) -> ColumnElement[bool]:
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


def lock_group(conn: Connection, group_id: str) -> Row[tuple[int, datetime | None]] | None:
    """Locks the group's row for writing and returns its (generation, deleted_at); None: never seen.

    For operator actions that decide under the lock (resets, deletes). Writes that give
    the group offsets lock, create and revive it inside ``offsetstore.write_batch``.
    """
    row = conn.execute(_LOCK_GROUP, {"group_id": group_id}).one()
    return None if row.generation is None else row


def or_no_offset(offset: int | None) -> int:
    return NO_OFFSET if offset is None else offset


def stale_error(group_id: str, requested: int, current: int) -> StaleGenerationError:
    return StaleGenerationError(
        f"generation {requested} of group {group_id!r} is stale; the current generation is {current}",
        metadata={"group_id": group_id, "current_generation": str(current), "generation": str(requested)},
    )


def observed_error(group_id: str, source: str) -> GroupObservedError:
    where = f" (read from {source})" if source else ""
    return GroupObservedError(
        f"group {group_id!r} is observed{where}: its pipeline keeps its positions, nothing commits them here;"
        f" adopt it first (offsetstore groups adopt {group_id} --from-observed --execute)",
        metadata={"group_id": group_id, "observed_source": source},
    )


def observed_source(conn: Connection, group_id: str) -> str | None:
    """Where an observed group's positions are read; None for a group that is not observed.

    Read under the group's lock (:func:`lock_group`), which ObserveOffsets takes too.
    """
    source: str | None = conn.execute(
        select(observed_groups.c.source).where(observed_groups.c.group_id == group_id)
    ).scalar_one_or_none()
    return source


def unobserve(conn: Connection, group_id: str) -> None:
    """Makes an observed group a committed one (an adoption), or forgets the mark of a deleted group."""
    conn.execute(delete(observed_groups).where(observed_groups.c.group_id == group_id))


def bump_generation(conn: Connection, group_id: str, *, deleted: bool = False) -> int:
    """Moves the generation on and counts a reset; ``deleted`` leaves the group as a tombstone."""
    deleted_at = func.statement_timestamp() if deleted else None
    insert = pg_insert(groups).values(group_id=group_id, generation=1, reset_count=1, deleted_at=deleted_at)
    stmt = insert.on_conflict_do_update(
        index_elements=[groups.c.group_id],
        set_={
            "generation": groups.c.generation + 1,
            "reset_count": groups.c.reset_count + 1,
            "deleted_at": deleted_at,
            "active_at": func.statement_timestamp(),
        },
    ).returning(groups.c.generation)
    generation: int = conn.execute(stmt).scalar_one()
    return generation


def now(conn: Connection) -> datetime:
    # The wall clock now, not the transaction's start: the change becomes visible at COMMIT.
    when: datetime = conn.execute(select(func.clock_timestamp())).scalar_one()
    return when


def record_changes(
    conn: Connection,
    group_id: str,
    changes: Sequence[tuple[TopicPartition, int | None, int | None]],
    kind: ChangeKind,
    generation: int,
    actor: str,
    when: datetime,
    source: str = "",
) -> None:
    if not changes:
        return
    # One statement over arrays, not a row each: a 10,000-partition change is one round trip, not 10,000
    # (each a Python turn on the server's event loop, which another tenant's calls wait for).
    rows = (
        func.unnest(
            literal([tp.topic for tp, _, _ in changes], ARRAY(Text)),
            literal([tp.partition for tp, _, _ in changes], ARRAY(Integer)),
            literal([before for _, before, _ in changes], ARRAY(BigInteger)),
            literal([after for _, _, after in changes], ARRAY(BigInteger)),
        )
        .table_valued("topic", "partition", "previous_offset", "new_offset")
        .render_derived(with_types=False)
    )
    values = {"group_id": literal(group_id, Text), "kind": literal(int(kind), SmallInteger),
              "generation": literal(generation, BigInteger), "change_time": literal(when, DateTime(timezone=True)),
              "actor": literal(actor, Text), "source": literal(source, Text)}  # fmt: skip
    columns = ["topic", "partition", "previous_offset", "new_offset", *values]
    conn.execute(
        offset_history.insert().from_select(
            columns, select(rows.c.topic, rows.c.partition, rows.c.previous_offset, rows.c.new_offset, *values.values())
        )
    )
