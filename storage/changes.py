"""What changed in the store since a reader's cursor: the history's new rows, for the server's Kafka mirror.

Every writer (the server, the sinks, the SQL API, a reset, an adoption) writes a history row
for each offset it changes, in the transaction that changes it, so the history's ids are the
one feed that sees every commit whoever made it. A reader follows them with a cursor (the
last id it read) and, because ids are taken when a row is inserted but become visible when
its transaction commits, with the ranges of ids below the cursor it has not seen yet
(*holes*: a transaction still open, or one rolled back). :func:`changes_since` reads both in
one statement, on one snapshot, and says which transactions that snapshot still saw running:
once every transaction that was running when a hole was found has ended, whatever the hole
still lacks was rolled back.

Each writer locks its group's row (an xid) before it inserts history rows: the transaction
that owns an id below a visible one was already running, and in the snapshot, when the id
was found missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from offsetstore.storage.clusters import bound_clusters

__all__ = ["Change", "ChangePage", "bound_and_latest_offsets", "changes_since", "history_end", "latest_offsets"]


@dataclass(frozen=True)
class Change:
    """One history row: its id and, for a group of the reader's prefixes, which partition it changed."""

    id: int
    #: None when the group is not one the reader asked for (the row still fills its id).
    group_id: str | None
    topic: str
    partition: int


@dataclass(frozen=True)
class ChangePage:
    """The rows after the cursor (at most ``limit``, in id order), those found in the holes, and the snapshot's bounds."""

    after: list[Change]
    in_holes: list[Change]
    #: The oldest transaction the snapshot saw running (``pg_snapshot_xmin``), as a full 64-bit id.
    xmin: int
    #: The first transaction id the snapshot saw as not yet started (``pg_snapshot_xmax``).
    xmax: int


# One statement, one snapshot: the page after the cursor, the holes' rows and the snapshot's
# bounds. The page is the primary key's range (id, change_time) of each history partition.
_CHANGES = text(
    """
    SELECT pg_snapshot_xmin(s)::text::bigint AS xmin, pg_snapshot_xmax(s)::text::bigint AS xmax,
        c.hole, c.id, c.group_id ^@ ANY(CAST(:prefixes AS text[])) AS wanted, c.group_id, c.topic, c.partition
    FROM pg_current_snapshot() AS s
    LEFT JOIN LATERAL (
        (SELECT false AS hole, h.id, h.group_id, h.topic, h.partition
         FROM offsetstore.offset_history AS h WHERE h.id > :after ORDER BY h.id LIMIT :limit)
        UNION ALL
        SELECT true, h.id, h.group_id, h.topic, h.partition
        FROM unnest(CAST(:lows AS bigint[]), CAST(:highs AS bigint[])) AS r(low, high)
        JOIN offsetstore.offset_history AS h ON h.id BETWEEN r.low AND r.high
    ) AS c ON true
    """
)


def changes_since(
    conn: Connection, after: int, holes: Sequence[tuple[int, int]], prefixes: Sequence[str], limit: int
) -> ChangePage:
    """The next ``limit`` history rows after id ``after``, the rows now in ``holes`` (inclusive id ranges), and the snapshot.

    Rows of groups outside ``prefixes`` come back without their group (their ids count: they
    fill the cursor's way). ``limit`` bounds the rows read after the cursor, whoever wrote them.
    """
    rows = conn.execute(
        _CHANGES,
        {
            "after": after,
            "limit": limit,
            "prefixes": list(prefixes),
            "lows": [low for low, _ in holes],
            "highs": [high for _, high in holes],
        },
    ).all()
    page: list[Change] = []
    found: list[Change] = []
    for r in rows:
        if r.id is None:  # the snapshot's row alone: nothing new
            continue
        change = Change(r.id, r.group_id if r.wanted else None, r.topic, r.partition)
        (found if r.hole else page).append(change)
    page.sort(key=lambda c: c.id)
    return ChangePage(page, found, rows[0].xmin, rows[0].xmax)


def history_end(conn: Connection) -> int:
    """The largest history id visible now (0 for an empty history): where a new reader may start."""
    end = conn.execute(text("SELECT coalesce(max(id), 0) FROM offsetstore.offset_history")).scalar_one()
    return int(end)


_LATEST = text(
    """
    SELECT o.group_id, o.topic, o.partition, o."offset"
    FROM unnest(CAST(:groups AS text[]), CAST(:topics AS text[]), CAST(:partitions AS integer[]))
        AS k(group_id, topic, partition)
    JOIN offsetstore.offsets AS o ON o.group_id = k.group_id AND o.topic = k.topic AND o.partition = k.partition
    """
)


def latest_offsets(conn: Connection, keys: Sequence[tuple[str, str, int]]) -> dict[tuple[str, str, int], int]:
    """The stored offset of each (group, topic, partition) of ``keys`` that has one (a deleted one has none)."""
    if not keys:
        return {}
    rows = conn.execute(
        _LATEST,
        {"groups": [k[0] for k in keys], "topics": [k[1] for k in keys], "partitions": [k[2] for k in keys]},
    )
    return {(r.group_id, r.topic, r.partition): r.offset for r in rows}


def bound_and_latest_offsets(
    conn: Connection, taken: Mapping[str, Sequence[tuple[str, int]]]
) -> tuple[dict[str, str], dict[tuple[str, str, int], int]]:
    """The mirror's read: the groups' cluster bindings, then their partitions' stored offsets.

    The bindings first: a switch that commits in between is seen in the offsets too, never a
    new binding with the offsets from before it.
    """
    bound = bound_clusters(conn, list(taken))
    return bound, latest_offsets(conn, [(g, t, p) for g, keys in taken.items() for t, p in keys])
