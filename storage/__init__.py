"""The storage core: every operation of the contract as one function over a caller's Connection.

Each function runs inside the caller's transaction and never commits, so the gRPC
server and the Spark sink share the very same code; the sink adds its rows to the
same transaction. Writes to a group first lock the group's row, which decides
generation checks, compare-and-set and resets under a lock instead of by
read-then-write races. Failures raise the typed errors of
``offsetstore.core.errors``; the caller rolls back, so nothing is written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar

import psycopg
import sqlalchemy.exc
from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Connection,
    Integer,
    Row,
    Text,
    and_,
    any_,
    bindparam,
    case,
    delete,
    false,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import (
    FieldViolation,
    GroupChangedError,
    GroupNotFoundError,
    InvalidArgumentError,
    OffsetMismatchError,
    OffsetStoreError,
    ResourceExhaustedError,
    StaleGenerationError,
)
from offsetstore.core.types import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    Boundary,
    ChangeKind,
    CommittedOffset,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    Page,
    PartitionStatus,
    ResetResult,
    TopicPartition,
    Watermark,
)
from offsetstore.storage import validate as check
from offsetstore.storage.schema import groups, offset_history, offsets, watermarks

__all__ = [
    "CommitRequest",
    "JoinRequest",
    "WriteRequest",
    "WriteOutcome",
    "check_write",
    "write_batch",
    "commit_offsets",
    "fetch_offsets",
    "reset_offsets",
    "delete_offsets",
    "join_group",
    "list_groups",
    "describe_group",
    "list_offset_history",
    "report_watermarks",
    "group_generation",
    "lock_offsets",
    "reset_count",
    "read_watermarks",
    "lag_columns",
    "past_log_end_column",
]

SelectionArg = Mapping[str, Iterable[int]] | Iterable[tuple[str, Iterable[int]]] | None


# --- statements built once; SQLAlchemy caches their compiled form ---------------

_GROUP_FOR_WRITE = (
    select(groups.c.generation, groups.c.deleted_at)
    .where(groups.c.group_id == bindparam("group_id"))
    # NO KEY UPDATE: conflicts with every other writer of the group, not with readers.
    .with_for_update(key_share=True)
)


def _among(table, pairs: Sequence[tuple[str, int]]) -> ColumnElement[bool]:
    """(topic, partition) is one of ``pairs``, as two array parameters.

    A row-value IN list of thousands of pairs exhausts PostgreSQL's stack; unnest does not.
    """
    rows = (
        func.unnest(literal([t for t, _ in pairs], ARRAY(Text)), literal([p for _, p in pairs], ARRAY(Integer)))
        .table_valued("topic", "partition")
        .render_derived(with_types=False)
    )
    return tuple_(table.c.topic, table.c.partition).in_(select(rows.c.topic, rows.c.partition))


def _selected(table, sels: Sequence[check.Selection]) -> ColumnElement[bool]:
    if not sels:
        return true()
    whole = [t for t, parts in sels if not parts]
    pairs = [(t, p) for t, parts in sels for p in parts]
    clauses = []
    if whole:
        clauses.append(table.c.topic == any_(literal(whole, ARRAY(Text))))
    if pairs:
        clauses.append(_among(table, pairs))
    return or_(*clauses)


def _lock_group(conn: Connection, group_id: str, *, create: bool) -> Row | None:
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


def _none(offset: int | None) -> int:
    return NO_OFFSET if offset is None else offset


R = TypeVar("R")


# --- commit and join: one server-side function writes a batch of them ------------


@dataclass(frozen=True)
class CommitRequest:
    """One CommitOffsets call: validated by :func:`check_write` before it joins a batch."""

    group_id: str
    commits: Sequence[OffsetCommit]
    generation: int = 0
    actor: str = ""


@dataclass(frozen=True)
class JoinRequest:
    """One JoinGroup call."""

    group_id: str
    member_id: str = ""
    member_host: str = ""


WriteRequest = CommitRequest | JoinRequest
#: A commit's offsets in request order, a join's generation, or the request's own error.
WriteOutcome = list[CommittedOffset] | int | OffsetStoreError

# migrations/versions/0004: each request decided under its group's lock, in group-id order.
_WRITE_BATCH = (
    'SELECT req, outcome, topic, partition, "offset", metadata, commit_time, stored FROM offsetstore.write_batch('
    "%(join)s::boolean[], %(group)s::text[], %(generation)s::bigint[], %(actor)s::text[], %(member_id)s::text[], "
    "%(member_host)s::text[], %(cas)s::boolean[], %(first)s::integer[], %(last)s::integer[], "
    "%(topic)s::text[], %(partition)s::integer[], %(offset)s::bigint[], %(metadata)s::text[], "
    "%(expected)s::bigint[])"
)
# write_batch's outcome column: 0 done, else the request's refusal.
_DONE, _STALE, _MISMATCH = 0, 1, 2
#: Yielded by hot steps between slices of a wide request's work: the asyncio path lets other calls run there.
PAUSE = None
_SLICE = 200


def check_write(request: WriteRequest) -> None:
    """Raises :class:`InvalidArgumentError` naming every bad field of ``request``."""
    v = check.Violations()
    check.group_id(request.group_id, violations=v)
    if isinstance(request, CommitRequest):
        check.commits(request.commits, violations=v)
        check.generation(request.generation, violations=v)
    else:
        check.member_id(request.member_id, violations=v)
        check.member_id(request.member_host, "member_host", violations=v)
    v.raise_if_any()


def write_batch(conn: Connection, requests: Sequence[WriteRequest]) -> list[WriteOutcome]:
    """Writes every request that may be written, in one statement; one outcome per request, in order.

    Requests must have passed :func:`check_write`. A stale generation or a
    compare-and-set mismatch is that request's outcome and writes nothing of it; the
    others still write. Commits with no offsets are not written here (see
    :func:`commit_offsets`). Row locks of the groups are held until the caller's
    transaction ends; they are taken in group-id order.
    """
    return run_hot(conn, write_batch_steps(requests))


def write_batch_steps(requests: Sequence[WriteRequest]) -> HotSteps[list[WriteOutcome]]:
    """:func:`write_batch` as steps: it yields its one statement, is sent the rows, returns the outcomes.

    The sync path (:func:`run_hot`) and the server's asyncio path drive the same steps,
    so the batch's parameters and the decoding of its outcomes exist once. Between slices
    of a wide batch's work it yields :data:`PAUSE`, where the asyncio path lets other calls run.
    """
    joins = [isinstance(r, JoinRequest) for r in requests]
    commits = [r.commits if isinstance(r, CommitRequest) else () for r in requests]
    ends = list(itertools.accumulate(len(c) for c in commits))
    every = [c for cs in commits for c in cs]
    params = {
        "join": _bools(joins),
        "group": _texts([r.group_id for r in requests]),
        "generation": _ints([r.generation if isinstance(r, CommitRequest) else 0 for r in requests]),
        "actor": _texts([r.actor if isinstance(r, CommitRequest) else "" for r in requests]),
        "member_id": _texts([r.member_id if isinstance(r, JoinRequest) else "" for r in requests]),
        "member_host": _texts([r.member_host if isinstance(r, JoinRequest) else "" for r in requests]),
        "cas": _bools([any(c.expected_offset is not None for c in cs) for cs in commits]),
        # A join's range of commits is empty (1..0); a commit's is its entries' 1-based positions.
        "first": _ints([1 if join else end - len(cs) + 1 for join, cs, end in zip(joins, commits, ends, strict=True)]),
        "last": _ints([0 if join else end for join, end in zip(joins, ends, strict=True)]),
    }
    for name, column in (
        ("topic", lambda: _texts([c.topic for c in every])),
        ("partition", lambda: _ints([c.partition for c in every])),
        ("offset", lambda: _ints([c.offset for c in every])),
        ("metadata", lambda: _texts([c.metadata for c in every])),
        ("expected", lambda: _ints([c.expected_offset for c in every])),
    ):
        if len(every) > _SLICE:
            yield PAUSE
        params[name] = column()
    rows = yield _WRITE_BATCH, params
    found: dict[int, list[tuple]] = {}
    for row in rows:
        found.setdefault(row[0] - 1, []).append(row)
    outcomes: list[WriteOutcome] = []
    for i, r in enumerate(requests):
        mine = found.get(i, [])
        if isinstance(r, JoinRequest) or (mine and mine[0][1] != _DONE):
            outcomes.append(_refusal_or_generation(r, mine))
            continue
        by_key = {(row[2], row[3]): row for row in mine}
        committed: list[CommittedOffset] = []
        for start in range(0, len(r.commits), _SLICE):
            if start:
                yield PAUSE
            for c in r.commits[start : start + _SLICE]:
                row = by_key[(c.topic, c.partition)]
                committed.append(CommittedOffset(c.topic, c.partition, row[4], row[5], row[6]))
        outcomes.append(committed)
    return outcomes


def _refusal_or_generation(request: WriteRequest, rows: list[tuple]) -> WriteOutcome:
    if isinstance(request, JoinRequest):
        return rows[0][7]
    if rows[0][1] == _STALE:
        return _stale(request.group_id, request.generation, rows[0][7])
    _, _, topic, partition, expected, _, _, stored = rows[0]
    return OffsetMismatchError(
        f"{topic}:{partition} has offset {stored}, not the expected {expected}",
        metadata={
            "topic": topic,
            "partition": str(partition),
            "stored_offset": str(stored),
            "expected_offset": str(expected),
        },
    )


# Array parameters travel as one array literal each, joined at C speed: psycopg would dump
# a 10,000-entry list element by element (milliseconds a column for the widest commit).


def _ints(values: Sequence[int | None]) -> str:
    if None in values:
        return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def _bools(values: Sequence[bool]) -> str:
    return "{" + ",".join("t" if v else "f" for v in values) + "}"


def _texts(values: Sequence[str]) -> str:
    if not values:
        return "{}"
    together = "".join(values)
    if '"' in together or "\\" in together:
        values = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(values) + '"}'


#: A statement of the hot path: SQL with ``%(name)s`` placeholders, and its parameters.
Statement = tuple[str, Mapping[str, object]]
#: An operation of the hot path as steps: yields statements (or PAUSE), is sent each one's rows, returns its result.
HotSteps = Generator[Statement | None, list[tuple] | None, R]


def run_hot(conn: Connection, steps: HotSteps[R]) -> R:
    """Drives ``steps`` on ``conn`` (sync): each statement prepared, on the psycopg connection under it.

    It skips SQLAlchemy's compile and result layers (most of a small call's cost), yet
    fails as every other statement does: with SQLAlchemy's ``DBAPIError`` around
    psycopg's error, the connection invalidated where it broke.
    """
    raw = conn.connection.driver_connection
    try:
        statement = next(steps)
        while True:
            if statement is PAUSE:
                statement = steps.send(None)
                continue
            sql, params = statement
            try:
                cursor = raw.execute(sql, params, prepare=True)
                rows = cursor.fetchall() if cursor.description is not None else []
            except psycopg.Error as error:
                if raw.broken:
                    conn.invalidate()
                raise sqlalchemy.exc.DBAPIError.instance(
                    sql, None, error, psycopg.Error, hide_parameters=True, connection_invalidated=raw.broken
                ) from None
            statement = steps.send(rows)
    except StopIteration as done:
        return done.value


def commit_offsets(
    conn: Connection,
    group_id: str,
    commits: Sequence[OffsetCommit],
    *,
    generation: int = 0,
    actor: str = "",
) -> list[CommittedOffset]:
    """Commits all ``commits`` of one group or raises; creates the group on its first commit.

    ``generation`` 0 is unfenced; any other value must be the group's current one
    (:class:`StaleGenerationError`). A commit with ``expected_offset`` is a
    compare-and-set (:class:`OffsetMismatchError`; -1 means "none stored yet").
    """
    request = CommitRequest(group_id, commits, generation, actor)
    check_write(request)
    if not commits:
        _check_generation(group_id, generation, group_generation(conn, group_id))
        return []
    outcome = write_batch(conn, [request])[0]
    if isinstance(outcome, OffsetStoreError):
        raise outcome
    assert isinstance(outcome, list)
    return outcome


def lock_offsets(conn: Connection, group_id: str, *, generation: int = 0) -> dict[TopicPartition, int]:
    """Locks the group for writing (creating it), checks ``generation`` and returns its stored offsets.

    For writers that decide under the lock what to write, as the Spark sink does:
    until the caller's transaction ends, no other writer, reset or delete can
    change the group's offsets or generation.
    """
    v = check.Violations()
    check.group_id(group_id, violations=v)
    check.generation(generation, violations=v)
    v.raise_if_any()
    group = _lock_group(conn, group_id, create=True)
    assert group is not None
    _check_generation(group_id, generation, group.generation)
    rows = conn.execute(
        select(offsets.c.topic, offsets.c.partition, offsets.c.offset).where(offsets.c.group_id == group_id)
    )
    return {TopicPartition(r.topic, r.partition): r.offset for r in rows}


def reset_count(conn: Connection, group_id: str) -> int:
    """How many resets and deletes the group id has had, kept across deletes; 0 for an unknown id."""
    value = conn.execute(select(groups.c.reset_count).where(groups.c.group_id == group_id)).scalar_one_or_none()
    return value or 0


def _stale(group_id: str, requested: int, current: int) -> StaleGenerationError:
    return StaleGenerationError(
        f"generation {requested} of group {group_id!r} is stale; the current generation is {current}",
        metadata={"group_id": group_id, "current_generation": str(current), "generation": str(requested)},
    )


def _check_generation(group_id: str, requested: int, current: int) -> None:
    if requested != 0 and requested != current:
        raise _stale(group_id, requested, current)


# --- reads ----------------------------------------------------------------------


def group_generation(conn: Connection, group_id: str) -> int:
    """The group id's current generation, kept across deletes; 0 for an id never seen."""
    value = conn.execute(select(groups.c.generation).where(groups.c.group_id == group_id)).scalar_one_or_none()
    return value or 0


# --- pages of offsets -------------------------------------------------------------
#
# A group's offsets are a few KB, or 44 MB: 10,000 partitions with 4 KB of metadata each.
# FetchOffsets and DescribeGroup answer at most ``max_bytes`` at once, measured in
# PostgreSQL before a row reaches Python: each row's size (its topic, its metadata, and an
# upper bound of the protobuf framing around them) is summed in key order, and a page ends
# where the sum passes ``max_bytes`` or its row count reaches ``page_size``. A request that
# asks for no pages (page_size 0) gets every offset at once, or, past ``max_bytes``,
# RESOURCE_EXHAUSTED telling it to page; it never gets a silently shortened answer.
# Each page is one statement (one snapshot). The token holds the generation the first page
# saw; a later page that sees another one (a join or a reset came between) fails with
# GroupChangedError, so pages never mix offsets from before and after a reset.

#: Protobuf bytes around one entry's topic and metadata, at most: field tags and lengths,
#: partition and offset varints, the commit time, the entry's own tag and length.
_FETCH_ENTRY_BYTES = 48
#: The same for DescribeGroup's PartitionStatus, which adds log start, log end, lag and the past-end flag.
_DESCRIBE_ENTRY_BYTES = 88
#: A response's bytes outside its entries: generation, page token, group id, member id and host.
_ENVELOPE_BYTES = 8192
#: page_size larger than this is cut to it: one request may name this many partitions.
MAX_OFFSETS_PAGE = check.MAX_PARTITIONS
#: Storage callers in-process (the Spark sink, the Kafka writer) read without a byte limit.
UNLIMITED = check.INT64_MAX

# The page, sized: at most page_size + 1 rows after the token's key (so that a page of a
# huge group reads no more than that), each row's size, the running sum in key order, and
# the rows that start within the budget (the first one to pass it included: it shows that
# there is more).
_GENERATION = (
    "coalesce((SELECT generation FROM offsetstore.groups WHERE group_id = %(group)s AND deleted_at IS NULL), 0)"
)
_FETCH = f"""
SELECT {_GENERATION}, sized.topic, sized.partition, sized."offset", sized.metadata, sized.commit_time, sized.upto
FROM (
    SELECT r.*, sum(r.size) OVER (ORDER BY r.topic, r.partition ROWS UNBOUNDED PRECEDING) AS upto
    FROM (
        SELECT * FROM ({{rows}}) AS unsized
        WHERE (unsized.topic, unsized.partition) > (%(after_topic)s, %(after_partition)s)
        ORDER BY unsized.topic, unsized.partition
        LIMIT %(rows)s
    ) AS r
) AS sized
WHERE sized.upto - sized.size <= %(budget)s
ORDER BY sized.topic, sized.partition
"""
#: The generation alone, for a page without rows.
_FETCH_GENERATION = f"SELECT {_GENERATION}"
_ROW_SIZE = f"octet_length(o.topic) + octet_length(o.metadata) + {_FETCH_ENTRY_BYTES} AS size"
_FETCH_ALL = _FETCH.format(
    rows=f"""SELECT o.topic, o.partition, o."offset", o.metadata, o.commit_time, {_ROW_SIZE}
    FROM offsetstore.offsets AS o WHERE o.group_id = %(group)s"""
)
# Named partitions without an offset come back as -1 (Kafka's convention), in their place
# in key order, so that they are paged like the others.
_FETCH_SELECTED = _FETCH.format(
    rows=f"""SELECT o.topic, o.partition, o."offset", o.metadata, o.commit_time, {_ROW_SIZE}
    FROM offsetstore.offsets AS o WHERE o.group_id = %(group)s AND o.topic = ANY(%(whole)s::text[])
    UNION ALL
    SELECT n.topic, n.partition, coalesce(o."offset", {NO_OFFSET}), coalesce(o.metadata, ''), o.commit_time,
        octet_length(n.topic) + coalesce(octet_length(o.metadata), 0) + {_FETCH_ENTRY_BYTES} AS size
    FROM unnest(%(topics)s::text[], %(partitions)s::integer[]) AS n(topic, partition)
    LEFT JOIN offsetstore.offsets AS o
        ON o.group_id = %(group)s AND o.topic = n.topic AND o.partition = n.partition"""
)


@dataclass(frozen=True)
class PageRequest:
    """Which page of a group's offsets to read, and how large it may be.

    ``page_size`` 0 asks for everything at once, refused beyond ``max_bytes``; above 0 it
    asks for pages of at most that many entries and ``max_bytes``.
    """

    page_size: int = 0
    page_token: str = ""
    max_bytes: int = UNLIMITED
    #: The store's page-token key (:func:`token_key`): tokens are signed and checked with it.
    key: bytes = b""

    def checked(self, v: check.Violations) -> int | None:
        """The row limit of the page (None: no limit); bad values are added to ``v``."""
        if self.page_size < 0:
            v.add("page_size", "must be >= 0")
        return min(self.page_size, MAX_OFFSETS_PAGE) if self.page_size > 0 else None


def _fingerprint(request: tuple) -> str:
    """What a page token is bound to: the request it continues (not its page size)."""
    return hashlib.blake2b(json.dumps(request).encode(), digest_size=8).hexdigest()


def _page_start(page: PageRequest, request: tuple) -> tuple[int | None, str, int]:
    """(generation seen by the first page or None, after topic, after partition) of ``page``'s token.

    ``request`` names what the token must have been issued for (the RPC, the group, its topics).
    """
    if not page.page_token:
        return None, "", -1
    value = _verified(page.page_token, page.key)
    if (
        isinstance(value, list)
        and len(value) == 4
        and value[0] == _fingerprint(request)
        and all(type(n) is int and 0 <= n <= check.INT64_MAX for n in (value[1], value[3]))
        and isinstance(value[2], str)
        and check.valid_topic(value[2])
    ):
        return value[1], value[2], value[3]
    raise InvalidArgumentError.field("page_token", "is not a token this server issued for this request")


def _cut_page(
    rows: Sequence[Row] | list[tuple], limit: int | None, page: PageRequest, what: str, upto: int = -1
) -> tuple[Sequence, bool]:
    """The rows of the page, and whether more follow; rows end with their running size (``upto``)."""
    if limit is not None and len(rows) > limit:
        return rows[:limit], True
    if rows and (rows[-1][upto] or 0) > page.max_bytes - _ENVELOPE_BYTES:
        if limit is None:
            raise ResourceExhaustedError(
                f"{what} would take more than the {page.max_bytes} bytes one response may hold; "
                "ask for it in pages (page_size > 0; the Python client does)",
                metadata={"limit": "response_bytes", "max_bytes": str(page.max_bytes)},
            )
        return rows[:-1], True
    return rows, False


def _next_token(request: tuple, generation: int, topic: str, partition: int, key: bytes) -> str:
    return _encode_token([_fingerprint(request), generation, topic, partition], key)


def _check_same_generation(group_id: str, seen: int | None, generation: int) -> None:
    if seen is not None and seen != generation:
        raise GroupChangedError(
            f"group {group_id!r} changed between two pages (generation {seen}, now {generation}: "
            "a join or a reset came between); read it again from the first page",
            metadata={"group_id": group_id, "generation": str(seen), "current_generation": str(generation)},
        )


def fetch_offsets(
    conn: Connection, group_id: str, topics: SelectionArg = None, page: PageRequest = PageRequest()
) -> FetchResult:
    """Committed offsets, one page of them; a named partition without one comes back with offset -1.

    One statement, so the page's offsets and the generation come from one snapshot.
    """
    return run_hot(conn, fetch_offsets_steps(group_id, topics, page))


def fetch_offsets_steps(
    group_id: str, topics: SelectionArg = None, page: PageRequest = PageRequest()
) -> HotSteps[FetchResult]:
    """:func:`fetch_offsets` as steps (see :func:`write_batch_steps`); bad input raises before the first."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    limit = page.checked(v)
    v.raise_if_any()
    request = ("fetch", group_id, sels)
    seen, after_topic, after_partition = _page_start(page, request)
    params = {
        "group": group_id,
        "after_topic": after_topic,
        "after_partition": after_partition,
        "budget": page.max_bytes - _ENVELOPE_BYTES,
        "rows": None if limit is None else limit + 1,
    }
    if sels:
        pairs = [(t, p) for t, parts in sels for p in parts]
        params.update(
            whole=[t for t, parts in sels if not parts],
            topics=[t for t, _ in pairs],
            partitions=[p for _, p in pairs],
        )
        rows = yield _FETCH_SELECTED, params
    else:
        rows = yield _FETCH_ALL, params
    # Each row carries the generation, read in the same statement; a page without rows asks for it.
    generation = rows[0][0] if rows else (yield _FETCH_GENERATION, {"group": group_id})[0][0]
    _check_same_generation(group_id, seen, generation)
    rows, more = _cut_page(rows, limit, page, f"the offsets of group {group_id!r}")
    offsets = {
        TopicPartition(topic, partition): CommittedOffset(topic, partition, offset, metadata, at)
        for _, topic, partition, offset, metadata, at, _ in rows
    }
    token = _next_token(request, generation, rows[-1][1], rows[-1][2], page.key) if more else ""
    return FetchResult(offsets=dict(sorted(offsets.items())), generation=generation, next_page_token=token)


def _effective_offset():
    # A sentinel offset resolves to the watermark it stands for.
    return case(
        (offsets.c.offset == EARLIEST, watermarks.c.log_start_offset),
        (offsets.c.offset == LATEST, watermarks.c.log_end_offset),
        else_=offsets.c.offset,
    )


def lag_columns():
    """(log_end_offset, lag) expressions over ``offsets`` outer-joined with ``watermarks``.

    -1 where no log end is known, and where the offset is past it: that is an anomaly
    (see `past_log_end_column`), never lag 0, and a sum over it would mean nothing.
    """
    effective = _effective_offset()
    log_end = func.coalesce(watermarks.c.log_end_offset, NO_OFFSET)
    lag = case(
        (or_(watermarks.c.log_end_offset.is_(None), effective.is_(None)), NO_OFFSET),
        (effective > watermarks.c.log_end_offset, NO_OFFSET),
        else_=watermarks.c.log_end_offset - effective,
    )
    return log_end, lag


def past_log_end_column():
    """Whether the offset is past the known log end (false where no log end is known)."""
    return func.coalesce(_effective_offset() > watermarks.c.log_end_offset, false())


def _with_watermarks():
    return offsets.outerjoin(
        watermarks, and_(watermarks.c.topic == offsets.c.topic, watermarks.c.partition == offsets.c.partition)
    )


def describe_group(conn: Connection, group_id: str, page: PageRequest = PageRequest()) -> GroupDescription:
    """One page of the group's partitions with log end and lag; :class:`GroupNotFoundError` if unknown or deleted.

    One statement, so the partitions and the generation come from one snapshot. A
    deleted group's error carries the generation and reset count its id keeps.
    """
    v = check.Violations()
    check.group_id(group_id, violations=v)
    limit = page.checked(v)
    v.raise_if_any()
    request = ("describe", group_id)
    seen, after_topic, after_partition = _page_start(page, request)
    group = (
        select(
            groups.c.generation,
            groups.c.reset_count,
            groups.c.deleted_at,
            groups.c.member_id,
            groups.c.member_host,
            groups.c.active_at,
        )
        .where(groups.c.group_id == group_id)
        .subquery("g")
    )
    log_end, lag = lag_columns()
    unsized = (
        select(
            offsets.c.topic,
            offsets.c.partition,
            offsets.c.offset,
            offsets.c.metadata,
            offsets.c.commit_time,
            log_end.label("log_end_offset"),
            lag.label("lag"),
            past_log_end_column().label("past_log_end"),
            func.coalesce(watermarks.c.log_start_offset, NO_OFFSET).label("log_start_offset"),
            (func.octet_length(offsets.c.topic) + func.octet_length(offsets.c.metadata) + _DESCRIBE_ENTRY_BYTES).label(
                "size"
            ),
        )
        .select_from(_with_watermarks())
        .where(
            offsets.c.group_id == group_id,
            tuple_(offsets.c.topic, offsets.c.partition) > (after_topic, after_partition),
        )
        .order_by(offsets.c.topic, offsets.c.partition)
        .limit(None if limit is None else limit + 1)
        .subquery("unsized")
    )
    sized = select(
        unsized,
        func.sum(unsized.c.size).over(order_by=(unsized.c.topic, unsized.c.partition), rows=(None, 0)).label("upto"),
    ).subquery("sized")
    part = (
        select(sized)
        .where(sized.c.upto - sized.c.size <= literal(page.max_bytes - _ENVELOPE_BYTES, BigInteger))
        .order_by(sized.c.topic, sized.c.partition)
        .lateral("part")
    )
    rows = conn.execute(
        select(group, part).select_from(group.outerjoin(part, true())).order_by(part.c.topic, part.c.partition)
    ).all()
    if not rows or rows[0].deleted_at is not None:
        metadata = {"group_id": group_id}
        if rows:
            metadata.update(generation=str(rows[0].generation), reset_count=str(rows[0].reset_count), deleted="true")
        raise GroupNotFoundError(f"group {group_id!r} does not exist", metadata=metadata)
    first = rows[0]
    _check_same_generation(group_id, seen, first.generation)
    listed, more = _cut_page(
        [r for r in rows if r.topic is not None], limit, page, f"the description of group {group_id!r}"
    )
    partitions = [
        PartitionStatus(
            r.topic,
            r.partition,
            r.offset,
            r.metadata,
            r.commit_time,
            r.log_end_offset,
            r.lag,
            r.past_log_end,
            r.log_start_offset,
        )
        for r in listed
    ]
    token = _next_token(request, first.generation, listed[-1].topic, listed[-1].partition, page.key) if more else ""
    return GroupDescription(
        group_id,
        first.generation,
        partitions,
        first.reset_count,
        first.member_id,
        first.member_host,
        token,
        first.active_at,
    )


# Page tokens are signed: base64url(JSON) "." base64url(HMAC-SHA256 of it, 16 bytes), under
# the store's key (migration 0006), so a token cannot be forged or altered; what a valid one
# holds is still checked, as any input is.
_TOKEN_KEY_SQL = "SELECT value FROM offsetstore.secrets WHERE name = 'page_token_key'"
_TOKEN_KEYS: dict[str, bytes] = {}


def token_key(conn: Connection) -> bytes:
    """The store's page-token key, read once per database by this process."""
    database = conn.engine.url.render_as_string(hide_password=False)
    found = _TOKEN_KEYS.get(database)
    if found is None:
        found = _TOKEN_KEYS[database] = bytes(conn.exec_driver_sql(_TOKEN_KEY_SQL).scalar_one())
    return found


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _mac(payload: str, key: bytes) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:16])


def _encode_token(value: object, key: bytes) -> str:
    payload = _b64(json.dumps(value).encode())
    return f"{payload}.{_mac(payload, key)}"


def _verified(token: str, key: bytes) -> object:
    """What a token this store signed holds; None for anything else."""
    payload, dot, mac = token.rpartition(".")
    if not dot or not hmac.compare_digest(mac.encode(), _mac(payload, key).encode()):
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def _decode_token(token: str, kind: type, key: bytes) -> object:
    value = _verified(token, key)
    valid = isinstance(value, kind) and not isinstance(value, bool)
    if isinstance(value, int):
        valid = valid and 0 < value <= check.INT64_MAX
    if isinstance(value, str):
        try:
            check.group_id(value)
        except InvalidArgumentError:
            valid = False
    if not valid:
        raise InvalidArgumentError.field("page_token", "is not a token this server issued")
    return value


def list_groups(conn: Connection, prefix: str = "", *, page_size: int = 0, page_token: str = "") -> Page[GroupSummary]:
    """Groups ordered by id, one page at a time."""
    v = check.Violations()
    check.prefix(prefix, violations=v)
    size = check.page_size(page_size, violations=v)
    v.raise_if_any()
    _, lag = lag_columns()
    per_group = (
        select(
            func.count().label("partition_count"),
            func.max(offsets.c.commit_time).label("last_commit_time"),
            # -1 unless every partition's lag is known: a partial sum would understate it.
            # The sum saturates at int64's maximum: two partitions whose log end is near it
            # (watermarks are any tenant's to report) must not overflow everyone's page.
            case(
                (func.count() == 0, NO_OFFSET),
                (func.bool_and(lag >= 0), func.least(func.sum(lag), check.INT64_MAX)),
                else_=NO_OFFSET,
            ).label("total_lag"),
        )
        .select_from(_with_watermarks())
        .where(offsets.c.group_id == groups.c.group_id)
        .lateral("per_group")
    )
    query = (
        select(
            groups.c.group_id,
            groups.c.generation,
            per_group.c.partition_count,
            per_group.c.last_commit_time,
            per_group.c.total_lag,
        )
        .select_from(groups.join(per_group, true()))
        .where(groups.c.deleted_at.is_(None))
        .order_by(groups.c.group_id)
        .limit(size + 1)
    )
    if prefix:
        query = query.where(func.starts_with(groups.c.group_id, prefix))
    if page_token:
        query = query.where(groups.c.group_id > _decode_token(page_token, str, token_key(conn)))
    rows = conn.execute(query).all()
    items = [
        GroupSummary(r.group_id, r.generation, r.partition_count, r.last_commit_time, int(r.total_lag))
        for r in rows[:size]
    ]
    token = _encode_token(items[-1].group_id, token_key(conn)) if len(rows) > size else ""
    return Page(items, token)


def list_offset_history(
    conn: Connection,
    group_id: str,
    topics: SelectionArg = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    page_size: int = 0,
    page_token: str = "",
) -> Page[OffsetChange]:
    """The group's commits, resets and deletes, newest first; ``since`` inclusive, ``until`` exclusive."""
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    size = check.page_size(page_size, violations=v)
    v.raise_if_any()
    h = offset_history
    query = (
        select(
            h.c.id,
            h.c.topic,
            h.c.partition,
            h.c.previous_offset,
            h.c.new_offset,
            h.c.kind,
            h.c.generation,
            h.c.change_time,
            h.c.actor,
        )
        .where(h.c.group_id == group_id, _selected(h, sels))
        .order_by(h.c.id.desc())
        .limit(size + 1)
    )
    if since is not None:
        query = query.where(h.c.change_time >= since)
    if until is not None:
        query = query.where(h.c.change_time < until)
    if page_token:
        query = query.where(h.c.id < _decode_token(page_token, int, token_key(conn)))
    rows = conn.execute(query).all()
    items = [
        OffsetChange(
            r.topic,
            r.partition,
            _none(r.previous_offset),
            _none(r.new_offset),
            ChangeKind(r.kind),
            r.generation,
            r.change_time,
            r.actor,
        )
        for r in rows[:size]
    ]
    token = _encode_token(rows[size - 1].id, token_key(conn)) if len(rows) > size else ""
    return Page(items, token)


# --- group membership and watermarks ---------------------------------------------


def join_group(conn: Connection, group_id: str, member_id: str = "", member_host: str = "") -> int:
    """Increments and returns the group's generation, creating the group at generation 1.

    A deleted group comes back with a generation above every one its id had.
    """
    request = JoinRequest(group_id, member_id, member_host)
    check_write(request)
    generation = write_batch(conn, [request])[0]
    assert isinstance(generation, int)
    return generation


def report_watermarks(conn: Connection, values: Sequence[Watermark]) -> None:
    """Stores the latest reported log start and end of each partition.

    A log start of -1 was not observed (a Spark batch sees only log ends): the one
    stored stays, and none is invented where none is stored.
    """
    run_hot(conn, report_watermarks_steps(values))


# One statement whatever the number of watermarks, in key order, so that concurrent
# reporters lock rows in one order and cannot deadlock. A kept log start never lies past
# the newest log end (LEAST skips NULLs, so an unknown start must stay NULL explicitly).
_REPORT_WATERMARKS = """
INSERT INTO offsetstore.watermarks AS w (topic, partition, log_start_offset, log_end_offset, updated_at)
SELECT r.topic, r.partition, r.log_start, r.log_end, statement_timestamp()
FROM unnest(%(topic)s::text[], %(partition)s::integer[], %(start)s::bigint[], %(end)s::bigint[])
    AS r(topic, partition, log_start, log_end)
ORDER BY r.topic, r.partition
ON CONFLICT (topic, partition) DO UPDATE SET
    log_start_offset = CASE
        WHEN coalesce(EXCLUDED.log_start_offset, w.log_start_offset) IS NULL THEN NULL
        ELSE least(coalesce(EXCLUDED.log_start_offset, w.log_start_offset), EXCLUDED.log_end_offset)
    END,
    log_end_offset = EXCLUDED.log_end_offset,
    updated_at = statement_timestamp()
"""


def report_watermarks_steps(values: Sequence[Watermark]) -> HotSteps[None]:
    """:func:`report_watermarks` as steps (see :func:`write_batch_steps`); bad input raises before the first."""
    check.watermarks(values)
    if not values:
        return
    params: dict[str, str] = {}
    for name, column in (
        ("topic", lambda: _texts([w.topic for w in values])),
        ("partition", lambda: _ints([w.partition for w in values])),
        ("start", lambda: _ints([None if w.log_start_offset == NO_OFFSET else w.log_start_offset for w in values])),
        ("end", lambda: _ints([w.log_end_offset for w in values])),
    ):
        if len(values) > _SLICE:
            yield PAUSE
        params[name] = column()
    yield _REPORT_WATERMARKS, params


def read_watermarks(conn: Connection, keys: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int | None, int]]:
    """The reported (log start or None where not observed, log end) of each of ``keys`` that has any."""
    keys = list(keys)
    if not keys:
        return {}
    rows = conn.execute(
        select(
            watermarks.c.topic, watermarks.c.partition, watermarks.c.log_start_offset, watermarks.c.log_end_offset
        ).where(_among(watermarks, keys))
    )
    return {TopicPartition(r.topic, r.partition): (r.log_start_offset, r.log_end_offset) for r in rows}


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
    from offsetstore.storage.retention import history_horizon

    h = offset_history
    latest = (
        select(h.c.topic, h.c.partition, h.c.new_offset)
        .ext(distinct_on(h.c.topic, h.c.partition))
        .where(h.c.group_id == group_id, h.c.change_time <= instant, _selected(h, sels))
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
        .where(h.c.group_id == group_id, h.c.change_time > instant, _selected(h, sels))
        .order_by(h.c.topic, h.c.partition, h.c.id)
    )
    for r in conn.execute(following):
        found.setdefault(TopicPartition(r.topic, r.partition), r.previous_offset)
    unchanged = select(offsets.c.topic, offsets.c.partition, offsets.c.offset).where(
        offsets.c.group_id == group_id, _selected(offsets, sels)
    )
    for r in conn.execute(unchanged):
        found.setdefault(TopicPartition(r.topic, r.partition), r.offset)
    return found


def reset_offsets(
    conn: Connection,
    group_id: str,
    topics: SelectionArg = None,
    *,
    all_topics: bool = False,
    to_offset: int | None = None,
    shift_by: int | None = None,
    to_boundary: Boundary | None = None,
    to_commit_time: datetime | None = None,
    dry_run: bool = False,
    actor: str = "",
) -> ResetResult:
    """The operator's reset of a selection to one target; bumps the generation unless ``dry_run``.

    Returns every selected partition with its previous and new offset (-1: none).
    """
    v = check.Violations()
    check.group_id(group_id, violations=v)
    sels = check.selections(topics, violations=v)
    _selection_required(sels, all_topics, v)
    targets = [t for t in (to_offset, shift_by, to_boundary, to_commit_time) if t is not None]
    if len(targets) != 1:
        v.add("target", "give exactly one of to_offset, shift_by, to_boundary, to_commit_time")
    if to_offset is not None and not 0 <= to_offset <= check.INT64_MAX:
        v.add("to_offset", "must be >= 0")
    if to_boundary is not None and to_boundary not in (Boundary.EARLIEST, Boundary.LATEST):
        v.add("to_boundary", "must be BOUNDARY_EARLIEST or BOUNDARY_LATEST")
    v.raise_if_any()

    group = _lock_group(conn, group_id, create=False)
    stored = {
        TopicPartition(r.topic, r.partition): r.offset
        for r in conn.execute(
            select(offsets.c.topic, offsets.c.partition, offsets.c.offset).where(
                offsets.c.group_id == group_id, _selected(offsets, sels)
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
    marks = read_watermarks(conn, selected) if to_commit_time is None else {}

    new: dict[TopicPartition, int] = {}
    for tp in sorted(selected):
        old = stored.get(tp)
        start, end = marks.get(tp, (None, None))
        if to_offset is not None:
            new[tp] = to_offset
        elif to_boundary is not None:
            if to_boundary == Boundary.EARLIEST:
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

    generation = group.generation if group is not None else 0
    # A reset of a live group always fences its writers; an unknown or deleted group
    # is (re)created only when the reset gives it an offset.
    live = group is not None and group.deleted_at is None
    bumps = live or bool(new)
    after = generation + 1 if bumps else generation
    changes = [
        OffsetChange(tp.topic, tp.partition, _none(stored.get(tp)), off, ChangeKind.RESET, after, None, actor)
        for tp, off in new.items()
    ]
    if dry_run:
        return ResetResult(changes, generation, True)
    if bumps:
        generation = _bump_generation(conn, group_id)
    when = _apply_reset(conn, group_id, new, stored, generation, actor)
    return ResetResult([replace(c, change_time=when) for c in changes], generation, False)


def _bump_generation(conn: Connection, group_id: str, *, deleted: bool = False) -> int:
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


def _apply_reset(
    conn: Connection,
    group_id: str,
    new: dict[TopicPartition, int],
    stored: dict[TopicPartition, int],
    generation: int,
    actor: str,
) -> datetime:
    """Writes the reset's offsets and history; returns the time it records."""
    when = _now(conn)
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
    _record(
        conn,
        group_id,
        [(tp, stored.get(tp), off) for tp, off in new.items()],
        ChangeKind.RESET,
        generation,
        actor,
        when,
    )
    return when


def _now(conn: Connection) -> datetime:
    # The wall clock now, not the transaction's start: the change becomes visible at COMMIT.
    return conn.execute(select(func.clock_timestamp())).scalar_one()


def _record(
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
    group = _lock_group(conn, group_id, create=False)
    if group is None or group.deleted_at is not None:
        return []
    rows = conn.execute(
        delete(offsets)
        .where(offsets.c.group_id == group_id, _selected(offsets, sels))
        .returning(offsets.c.topic, offsets.c.partition, offsets.c.offset)
    ).all()
    deleted = sorted(TopicPartition(r.topic, r.partition) for r in rows)
    # Like a reset, the delete moves the generation on (and the reset count, so a Spark
    # query restarts on a fresh checkpoint). Deleting the group keeps its row as a
    # tombstone: the generation of a group id never repeats.
    if not (all_topics or rows):
        return []
    generation = _bump_generation(conn, group_id, deleted=all_topics)
    _record(
        conn,
        group_id,
        [
            (TopicPartition(r.topic, r.partition), r.offset, None)
            for r in sorted(rows, key=lambda r: (r.topic, r.partition))
        ],
        ChangeKind.DELETE,
        generation,
        actor,
        _now(conn),
    )
    return deleted
