"""Commits and joins: one server-side function (``offsetstore.write_batch``) writes a batch of them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from sqlalchemy import (
    Connection,
    select,
    text,
)

from offsetstore.core.errors import (
    OffsetMismatchError,
    OffsetStoreError,
)
from offsetstore.core.types import (
    CommittedOffset,
    OffsetCommit,
    RecordFingerprint,
    TopicPartition,
)
from offsetstore.storage import validate as check
from offsetstore.storage._groups import observed_error, stale_error
from offsetstore.storage.clusters import bind_cluster
from offsetstore.storage.schema import groups
from offsetstore.storage.steps import PAUSE, SLICE, HotSteps, bool_array, drive_steps, int_array, text_array

# --- commit and join: one server-side function writes a batch of them ------------


@dataclass(frozen=True)
class CommitRequest:
    """One CommitOffsets call: validated by :func:`check_write` before it joins a batch."""

    group_id: str
    commits: Sequence[OffsetCommit]
    generation: int = 0
    actor: str = ""
    #: The record before each of some committed offsets, stored with them (issue 58).
    fingerprints: Sequence[tuple[TopicPartition, RecordFingerprint]] = ()


@dataclass(frozen=True)
class JoinRequest:
    """One JoinGroup call."""

    group_id: str
    member_id: str = ""
    member_host: str = ""


WriteRequest: TypeAlias = CommitRequest | JoinRequest
#: A commit's offsets in request order, a join's generation, or the request's own error.
WriteOutcome: TypeAlias = list[CommittedOffset] | int | OffsetStoreError

# write_batch's result columns, read by name: the SELECT list is built from these names, so
# a name's place here is its place in every row, whatever order the function declares.
_COLUMNS = ("req", "outcome", "topic", "partition", "offset", "metadata", "commit_time", "stored")
_AT = {name: i for i, name in enumerate(_COLUMNS)}
# Looked up once: rows stay the driver's tuples, the commit path builds no object per row.
_REQ, _OUTCOME, _TOPIC, _PARTITION = _AT["req"], _AT["outcome"], _AT["topic"], _AT["partition"]
_OFFSET, _METADATA, _COMMIT_TIME, _STORED = _AT["offset"], _AT["metadata"], _AT["commit_time"], _AT["stored"]

# storage/sql/write_batch.sql: each request decided under its group's lock, in group-id order.
_WRITE_BATCH = (
    "SELECT " + ", ".join(f'"{c}"' for c in _COLUMNS) + " FROM offsetstore.write_batch("
    "%(join)s::boolean[], %(group)s::text[], %(generation)s::bigint[], %(actor)s::text[], %(member_id)s::text[], "
    "%(member_host)s::text[], %(cas)s::boolean[], %(first)s::integer[], %(last)s::integer[], "
    "%(topic)s::text[], %(partition)s::integer[], %(offset)s::bigint[], %(metadata)s::text[], "
    "%(expected)s::bigint[])"
)
# write_batch's (and lock_for_write's) outcome column: 0 done, else the request's refusal.
_DONE, _STALE, _MISMATCH, _OBSERVED = 0, 1, 2, 3

# The fingerprints of a batch's commits that were written, in the batch's transaction: one statement
# (arrays, digests as hex), sent only when a request carries some.
_WRITE_FINGERPRINTS = (
    'INSERT INTO offsetstore.record_fingerprints (group_id, topic, "partition", "offset", timestamp_ms, digest) '
    "SELECT g, t, p, o, ts, decode(d, 'hex') FROM unnest(%(group)s::text[], %(topic)s::text[], "
    "%(partition)s::integer[], %(offset)s::bigint[], %(timestamp)s::bigint[], %(digest)s::text[]) AS u(g, t, p, o, ts, d) "
    'ON CONFLICT (group_id, topic, "partition") DO UPDATE '
    'SET "offset" = excluded."offset", timestamp_ms = excluded.timestamp_ms, digest = excluded.digest'
)

# storage/sql/lock_for_write.sql: a commit of no offsets (lock, create or revive, fence), then the offsets.
_LOCK_FOR_WRITE = text(
    'SELECT outcome, topic, "partition", "offset", stored FROM offsetstore.lock_for_write(:group_id, :generation)'
)
# storage/sql/stale_generation.sql, for a commit of nothing: it neither locks nor creates the group.
_FENCE = text(
    "SELECT c.generation, offsetstore.stale_generation(:generation, c.generation) AS stale FROM ("
    "SELECT coalesce(max(g.generation), 0) AS generation FROM offsetstore.groups AS g WHERE g.group_id = :group_id"
    ") AS c"
)


def check_write(request: WriteRequest, *, kafka_cluster_id: str = "") -> None:
    """Raises :class:`InvalidArgumentError` naming every bad field of ``request`` (and of a join's cluster id)."""
    v = check.Violations()
    check.group_id(request.group_id, violations=v)
    if isinstance(request, CommitRequest):
        check.commits(request.commits, violations=v)
        check.generation(request.generation, violations=v)
        if request.fingerprints:
            check.fingerprints(request.fingerprints, request.commits, violations=v)
    else:
        check.member_id(request.member_id, violations=v)
        check.member_id(request.member_host, "member_host", violations=v)
        check.cluster_id(kafka_cluster_id, violations=v)
    v.raise_if_any()


def write_batch(conn: Connection, requests: Sequence[WriteRequest]) -> list[WriteOutcome]:
    """Writes every request that may be written, in one statement; one outcome per request, in order.

    Requests must have passed :func:`check_write`. A stale generation or a
    compare-and-set mismatch is that request's outcome and writes nothing of it; the
    others still write. Commits with no offsets are not written here (see
    :func:`commit_offsets`). Row locks of the groups are held until the caller's
    transaction ends; they are taken in group-id order.
    """
    outcomes: list[WriteOutcome] = drive_steps(conn, write_batch_steps(requests))
    return outcomes


def write_batch_steps(requests: Sequence[WriteRequest]) -> HotSteps[list[WriteOutcome]]:
    """:func:`write_batch` as steps: it yields its one statement, is sent the rows, returns the outcomes.

    The sync path (:func:`drive_steps`) and the server's asyncio path drive the same steps,
    so the batch's parameters and the decoding of its outcomes exist once. Between slices
    of a wide batch's work it yields :data:`PAUSE`, where the asyncio path lets other calls run.
    """
    joins = [isinstance(r, JoinRequest) for r in requests]
    commits = [r.commits if isinstance(r, CommitRequest) else () for r in requests]
    ends = list(itertools.accumulate(len(c) for c in commits))
    every = [c for cs in commits for c in cs]
    params = {
        "join": bool_array(joins),
        "group": text_array([r.group_id for r in requests]),
        "generation": int_array([r.generation if isinstance(r, CommitRequest) else 0 for r in requests]),
        "actor": text_array([r.actor if isinstance(r, CommitRequest) else "" for r in requests]),
        "member_id": text_array([r.member_id if isinstance(r, JoinRequest) else "" for r in requests]),
        "member_host": text_array([r.member_host if isinstance(r, JoinRequest) else "" for r in requests]),
        "cas": bool_array([any(c.expected_offset is not None for c in cs) for cs in commits]),
        # A join's range of commits is empty (1..0); a commit's is its entries' 1-based positions.
        "first": int_array(
            [1 if join else end - len(cs) + 1 for join, cs, end in zip(joins, commits, ends, strict=True)]
        ),
        "last": int_array([0 if join else end for join, end in zip(joins, ends, strict=True)]),
    }
    columns: tuple[tuple[str, Callable[[], str]], ...] = (
        ("topic", lambda: text_array([c.topic for c in every])),
        ("partition", lambda: int_array([c.partition for c in every])),
        ("offset", lambda: int_array([c.offset for c in every])),
        ("metadata", lambda: text_array([c.metadata for c in every])),
        ("expected", lambda: int_array([c.expected_offset for c in every])),
    )
    for name, column in columns:
        if len(every) > SLICE:
            yield PAUSE
        params[name] = column()
    rows = yield _WRITE_BATCH, params
    assert rows is not None
    found: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        found.setdefault(row[_REQ] - 1, []).append(row)
    outcomes: list[WriteOutcome] = []
    for i, r in enumerate(requests):
        mine = found.get(i, [])
        if isinstance(r, JoinRequest) or (mine and mine[0][_OUTCOME] != _DONE):
            outcomes.append(_refusal_or_generation(r, mine))
            continue
        by_key = {(row[_TOPIC], row[_PARTITION]): row for row in mine}
        committed: list[CommittedOffset] = []
        for start in range(0, len(r.commits), SLICE):
            if start:
                yield PAUSE
            for c in r.commits[start : start + SLICE]:
                row = by_key[(c.topic, c.partition)]
                committed.append(CommittedOffset(c.topic, c.partition, row[_OFFSET], row[_METADATA], row[_COMMIT_TIME]))
        outcomes.append(committed)
    if any(isinstance(r, CommitRequest) and r.fingerprints for r in requests):
        yield _fingerprints_statement(requests, outcomes)
    return outcomes


def _fingerprints_statement(
    requests: Sequence[WriteRequest], outcomes: Sequence[WriteOutcome]
) -> tuple[str, dict[str, str]]:
    """The statement storing the fingerprints of the commits that were written (none of a refused one)."""
    found: dict[tuple[str, TopicPartition], RecordFingerprint] = {}
    for r, outcome in zip(requests, outcomes, strict=True):
        if isinstance(r, CommitRequest) and isinstance(outcome, list):
            # A group's requests are written in batch order: a later commit's fingerprint is the one kept.
            found.update(((r.group_id, tp), fp) for tp, fp in r.fingerprints)
    params = {
        "group": text_array([g for g, _ in found]),
        "topic": text_array([tp.topic for _, tp in found]),
        "partition": int_array([tp.partition for _, tp in found]),
        "offset": int_array([fp.offset for fp in found.values()]),
        "timestamp": int_array([fp.timestamp_ms for fp in found.values()]),
        "digest": text_array([fp.digest.hex() for fp in found.values()]),
    }
    return _WRITE_FINGERPRINTS, params


def _refusal_or_generation(request: WriteRequest, rows: list[tuple[Any, ...]]) -> WriteOutcome:
    first = rows[0]
    if isinstance(request, JoinRequest):
        generation: int = first[_STORED]
        return generation
    if first[_OUTCOME] == _STALE:
        return stale_error(request.group_id, request.generation, first[_STORED])
    if first[_OUTCOME] == _OBSERVED:  # its `metadata` is where the group's positions are read
        return observed_error(request.group_id, first[_METADATA])
    # A mismatch's `offset` is the expected one.
    topic, partition, expected, stored = first[_TOPIC], first[_PARTITION], first[_OFFSET], first[_STORED]
    return OffsetMismatchError(
        f"{topic}:{partition} has offset {stored}, not the expected {expected}",
        metadata={
            "topic": topic,
            "partition": str(partition),
            "stored_offset": str(stored),
            "expected_offset": str(expected),
        },
    )


def commit_offsets(
    conn: Connection,
    group_id: str,
    commits: Sequence[OffsetCommit],
    *,
    generation: int = 0,
    actor: str = "",
    fingerprints: Sequence[tuple[TopicPartition, RecordFingerprint]] = (),
) -> list[CommittedOffset]:
    """Commits all ``commits`` of one group or raises; creates the group on its first commit.

    ``generation`` 0 is unfenced; any other value must be the group's current one
    (:class:`StaleGenerationError`). A commit with ``expected_offset`` is a
    compare-and-set (:class:`OffsetMismatchError`; -1 means "none stored yet").
    ``fingerprints`` are stored with the offsets they precede (see :func:`check.fingerprints`).
    """
    request = CommitRequest(group_id, commits, generation, actor, fingerprints)
    check_write(request)
    if not commits:
        fence = conn.execute(_FENCE, {"group_id": group_id, "generation": generation}).one()
        if fence.stale:
            raise stale_error(group_id, generation, fence.generation)
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
    rows = conn.execute(_LOCK_FOR_WRITE, {"group_id": group_id, "generation": generation}).all()
    if rows and rows[0].outcome == _STALE:
        raise stale_error(group_id, generation, rows[0].stored)
    if rows and rows[0].outcome == _OBSERVED:
        raise observed_error(group_id, "")
    return {TopicPartition(r.topic, r.partition): r.offset for r in rows}


def reset_count(conn: Connection, group_id: str) -> int:
    """How many resets and deletes the group id has had, kept across deletes; 0 for an unknown id."""
    value = conn.execute(select(groups.c.reset_count).where(groups.c.group_id == group_id)).scalar_one_or_none()
    return value or 0


def group_generation(conn: Connection, group_id: str) -> int:
    """The group id's current generation, kept across deletes; 0 for an id never seen."""
    value = conn.execute(select(groups.c.generation).where(groups.c.group_id == group_id)).scalar_one_or_none()
    return value or 0


def join_group(
    conn: Connection, group_id: str, member_id: str = "", member_host: str = "", *, kafka_cluster_id: str = ""
) -> int:
    """Increments and returns the group's generation, creating the group at generation 1.

    A deleted group comes back with a generation above every one its id had. With
    ``kafka_cluster_id``, the join binds an unbound group to that Kafka cluster, or raises
    :class:`ClusterMismatchError` for a group bound to another: the caller's transaction must
    then roll back, or the generation moves on for a writer that cannot write.
    """
    request = JoinRequest(group_id, member_id, member_host)
    check_write(request, kafka_cluster_id=kafka_cluster_id)
    generation = write_batch(conn, [request])[0]
    assert isinstance(generation, int)
    if kafka_cluster_id:
        bind_cluster(conn, group_id, kafka_cluster_id)  # under the lock the join took
    return generation
