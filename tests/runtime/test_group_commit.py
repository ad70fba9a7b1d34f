"""Group commit: concurrent commits and joins share a transaction, and each keeps its own answer.

A batch is made deterministic by starting its calls in one turn of the store's event loop
(:func:`at_once`): each queues its request before the flusher it wakes runs, so they all go
into one batch. Holding a group's row lock from another session cannot keep the flusher
waiting: a batch waits for a lock 50 ms at most, then its requests run alone. The tests see
the batches (who was in each transaction, how it ended) through the store's carry seam, and
commits of one batch share their statement's ``statement_timestamp()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import psycopg
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.client import (
    ChangeKind,
    CommittedOffset,
    OffsetCommit,
    OffsetMismatchError,
    StaleGenerationError,
    StoreUnavailableError,
    TopicPartition,
)
from offsetstore.runtime._group_commit import GONE, CallersLeft
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store, deadline
from offsetstore.storage.engine import SessionSettings
from tests.fixtures.concurrency import wait_until
from tests.fixtures.fix_db import group_locked
from tests.fixtures.group_commit import Batches, at_once, fresh

R = TypeVar("R")

TOPIC = "orders"


def history(engine: sa.Engine, group_id: str) -> list[tuple[int, int | None, int | None]]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT kind, previous_offset, new_offset FROM offsetstore.offset_history WHERE group_id = %(g)s ORDER BY id",
            {"g": group_id},
        )
        return [tuple(r) for r in rows]


def group_row(engine: sa.Engine, group_id: str) -> tuple | None:
    with engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT generation, deleted_at IS NOT NULL FROM offsetstore.groups WHERE group_id = %(g)s", {"g": group_id}
        ).one_or_none()
        return None if row is None else tuple(row)


# --- the storage core: one statement, an outcome per request ------------------------------


def test_one_batch_answers_each_request_on_its_own(engine: sa.Engine) -> None:
    fenced, mismatched, good, joined, new_refused = (fresh() for _ in range(5))
    with engine.begin() as conn:
        storage.commit_offsets(conn, fenced, [OffsetCommit(TOPIC, 0, 5)])
        generation = storage.join_group(conn, fenced)
        storage.commit_offsets(conn, mismatched, [OffsetCommit(TOPIC, 0, 7)])
    with engine.begin() as conn:
        outcomes = storage.write_batch(
            conn,
            [
                storage.CommitRequest(fenced, [OffsetCommit(TOPIC, 0, 6)], generation=generation + 3),
                storage.CommitRequest(mismatched, [OffsetCommit(TOPIC, 0, 8, expected_offset=3)]),
                storage.CommitRequest(good, [OffsetCommit(TOPIC, 1, 10), OffsetCommit(TOPIC, 0, 11, metadata="m")]),
                storage.JoinRequest(joined, "member-1"),
                # Depends on the request before it in the same batch: it sees what that one wrote.
                storage.CommitRequest(good, [OffsetCommit(TOPIC, 1, 12, expected_offset=10)]),
                # Refused on a group that did not exist: the group is not created either.
                storage.CommitRequest(new_refused, [OffsetCommit(TOPIC, 0, 1, expected_offset=4)]),
            ],
        )
    stale, mismatch, first, join, second, refused = outcomes
    assert isinstance(stale, StaleGenerationError)
    assert stale.metadata["current_generation"] == str(generation)
    assert isinstance(mismatch, OffsetMismatchError)
    assert (mismatch.metadata["stored_offset"], mismatch.metadata["expected_offset"]) == ("7", "3")
    assert isinstance(first, list) and [(c.topic, c.partition, c.offset, c.metadata) for c in first] == [
        (TOPIC, 1, 10, ""),
        (TOPIC, 0, 11, "m"),
    ]
    assert join == 1
    assert isinstance(second, list) and [c.offset for c in second] == [12]
    assert isinstance(refused, OffsetMismatchError) and refused.metadata["stored_offset"] == "-1"

    with engine.connect() as conn:
        assert storage.fetch_offsets(conn, fenced).offsets[TopicPartition(TOPIC, 0)].offset == 5
        assert storage.fetch_offsets(conn, mismatched).offsets[TopicPartition(TOPIC, 0)].offset == 7
        assert {tp.partition: c.offset for tp, c in storage.fetch_offsets(conn, good).offsets.items()} == {0: 11, 1: 12}
    assert history(engine, fenced) == [(int(ChangeKind.COMMIT), None, 5)]
    assert history(engine, mismatched) == [(int(ChangeKind.COMMIT), None, 7)]
    assert sorted(history(engine, good), key=lambda h: h[2]) == [
        (int(ChangeKind.COMMIT), None, 10),
        (int(ChangeKind.COMMIT), None, 11),
        (int(ChangeKind.COMMIT), 10, 12),
    ]
    assert group_row(engine, new_refused) is None
    assert group_row(engine, joined) == (1, False)


def test_a_commit_in_a_batch_brings_a_deleted_group_back_with_its_generation(engine: sa.Engine) -> None:
    group = fresh()
    with engine.begin() as conn:
        storage.commit_offsets(conn, group, [OffsetCommit(TOPIC, 0, 5)])
        storage.delete_offsets(conn, group, all_topics=True)
    kept = group_row(engine, group)
    assert kept is not None and kept[1]  # a tombstone
    with engine.begin() as conn:
        (outcome,) = storage.write_batch(conn, [storage.CommitRequest(group, [OffsetCommit(TOPIC, 0, 9)])])
    assert isinstance(outcome, list) and outcome[0].offset == 9
    assert kept is not None and group_row(engine, group) == (kept[0], False)


# --- the Store: concurrent callers coalesce ----------------------------------------------


@pytest.fixture
def batches() -> Batches:
    return Batches()


@pytest.fixture
def one_flusher(database_url: str, batches: Batches) -> Iterator[Store]:
    store = Store.open(
        StoreConfig(
            database_url,
            SessionSettings(statement_timeout_ms=60_000),
            hot_pool_size=4,
            write_flushers=1,
            carry=batches.carry(),
        )
    )
    yield store
    store.dispose()


async def bounded(seconds: float, is_active: Callable[[], bool], call: Awaitable[R]) -> R:
    """``call`` awaited under the caller's :func:`deadline` (``seconds``, ``is_active``)."""
    with deadline(seconds, is_active):
        return await call


def test_concurrent_commits_share_one_transaction_and_keep_their_own_answers(
    one_flusher: Store, batches: Batches, engine: sa.Engine
) -> None:
    store = one_flusher
    fenced, mismatched, good_a, good_b, joined = (fresh() for _ in range(5))
    store.commit_offsets(fenced, [OffsetCommit(TOPIC, 0, 1)])
    generation = store.join_group(fenced)
    store.commit_offsets(mismatched, [OffsetCommit(TOPIC, 0, 7)])
    batches.seen.clear()

    aio = store.aio
    outcome = at_once(
        store,
        {
            "stale": lambda: aio.commit_offsets(fenced, [OffsetCommit(TOPIC, 0, 2)], generation=generation + 5),
            "mismatch": lambda: aio.commit_offsets(mismatched, [OffsetCommit(TOPIC, 0, 8, expected_offset=6)]),
            "a": lambda: aio.commit_offsets(good_a, [OffsetCommit(TOPIC, 0, 100)]),
            "b": lambda: aio.commit_offsets(good_b, [OffsetCommit(TOPIC, 3, 200, expected_offset=-1)]),
            "join": lambda: aio.join_group(joined),
        },
    )
    assert batches.seen == [(["a", "b", "join", "mismatch", "stale"], None)]  # one transaction, committed
    assert isinstance(outcome["stale"], StaleGenerationError)
    assert isinstance(outcome["mismatch"], OffsetMismatchError)
    committed_a: list[CommittedOffset] = outcome["a"]
    committed_b: list[CommittedOffset] = outcome["b"]
    assert committed_a[0].offset == 100 and committed_b[0].offset == 200
    assert outcome["join"] == 1
    # One statement wrote both: they share its statement_timestamp().
    assert committed_a[0].commit_time == committed_b[0].commit_time
    assert store.fetch_offsets(fenced).offsets[TopicPartition(TOPIC, 0)].offset == 1
    assert store.fetch_offsets(mismatched).offsets[TopicPartition(TOPIC, 0)].offset == 7
    assert [k for k, _, _ in history(engine, fenced)] == [int(ChangeKind.COMMIT)]


def test_a_batch_stuck_on_one_locked_group_still_commits_the_others(
    one_flusher: Store, batches: Batches, database_url: str
) -> None:
    store = one_flusher
    locked, free = fresh(), fresh()
    store.commit_offsets(locked, [OffsetCommit(TOPIC, 0, 1)])
    batches.seen.clear()

    def commit(group: str, seconds: float) -> Callable[[], Awaitable[list[CommittedOffset]]]:
        return lambda: bounded(seconds, lambda: True, store.aio.commit_offsets(group, [OffsetCommit(TOPIC, 0, 2)]))

    with group_locked(database_url, locked) as lock:
        started = time.monotonic()
        outcome = at_once(store, {"locked": commit(locked, 1.5), "free": commit(free, 60)})
        # The batch gave up on the held lock at once; each request then ran alone, the held
        # group's until its caller's deadline, not the store's minute.
        assert time.monotonic() - started < 30
        assert lock.waiting() == 0
    ((names, error),) = batches.seen
    assert names == ["free", "locked"] and isinstance(error, StoreUnavailableError)
    assert isinstance(error.__cause__, psycopg.errors.LockNotAvailable)
    assert isinstance(outcome["locked"], StoreUnavailableError)
    assert isinstance(outcome["free"], list) and outcome["free"][0].offset == 2
    assert store.fetch_offsets(locked).offsets[TopicPartition(TOPIC, 0)].offset == 1


def test_a_caller_gone_before_commit_is_taken_out_and_the_batch_redone(one_flusher: Store, batches: Batches) -> None:
    store = one_flusher
    leaving, staying = fresh(), fresh()
    store.commit_offsets(leaving, [OffsetCommit(TOPIC, 0, 1)])
    batches.seen.clear()
    there = threading.Event()
    there.set()

    def leave_once_in_the_batch(names: list[str]) -> None:
        # The batch is made (its callers were all there); the caller leaves before its COMMIT.
        if "leaving" in names:
            there.clear()

    def commit(group: str, is_active: Callable[[], bool]) -> Callable[[], Awaitable[list[CommittedOffset]]]:
        return lambda: bounded(60, is_active, store.aio.commit_offsets(group, [OffsetCommit(TOPIC, 0, 5)]))

    batches.on_enter = leave_once_in_the_batch
    outcome = at_once(store, {"leaving": commit(leaving, there.is_set), "staying": commit(staying, lambda: True)})
    # Taken out: the batch of both was rolled back, then redone without the caller that left.
    assert [(names, type(error)) for names, error in batches.seen] == [
        (["leaving", "staying"], CallersLeft),
        (["staying"], type(None)),
    ]
    assert isinstance(outcome["leaving"], StoreUnavailableError) and outcome["leaving"].message == GONE
    assert isinstance(outcome["staying"], list) and outcome["staying"][0].offset == 5
    assert store.fetch_offsets(leaving).offsets[TopicPartition(TOPIC, 0)].offset == 1
    assert store.fetch_offsets(staying).offsets[TopicPartition(TOPIC, 0)].offset == 5


def test_a_caller_gone_while_its_request_runs_alone_is_told_so_and_nothing_is_committed(
    one_flusher: Store, batches: Batches, database_url: str, engine: sa.Engine
) -> None:
    store = one_flusher
    group = fresh()
    store.commit_offsets(group, [OffsetCommit(TOPIC, 0, 1)])
    batches.seen.clear()
    there = threading.Event()
    there.set()

    def commit() -> list[CommittedOffset]:
        with deadline(60, there.is_set):
            return store.commit_offsets(group, [OffsetCommit(TOPIC, 0, 2)])

    with group_locked(database_url, group) as lock, ThreadPoolExecutor(max_workers=1) as pool:
        call = pool.submit(commit)
        # The batch gave up on the held lock: the request runs alone now, in its caller's task,
        # and it is the one that waits for the lock.
        wait_until(lambda: len(batches.seen) == 1)
        wait_until(lambda: lock.waiting() == 1)
        there.clear()
        lock.release()
        error = call.exception(60)
    ((_, batch_error),) = batches.seen
    assert isinstance(batch_error, StoreUnavailableError) and isinstance(
        batch_error.__cause__, psycopg.errors.LockNotAvailable
    )
    # Before: the alone run's rollback escaped as the batcher's internal CallersLeft.
    assert isinstance(error, StoreUnavailableError) and error.message == GONE
    assert store.fetch_offsets(group).offsets[TopicPartition(TOPIC, 0)].offset == 1
    assert history(engine, group) == [(int(ChangeKind.COMMIT), None, 1)]


def test_write_flushers_are_read_from_flags_and_environment_and_bounded_by_the_pool() -> None:
    from offsetstore.server.config import Settings

    assert Settings.load({}, {}).write_flushers == 2
    assert Settings.load({}, {"OFFSETSTORE_WRITE_FLUSHERS": "3"}).write_flushers == 3
    assert Settings.load({"write_flushers": 1}, {"OFFSETSTORE_WRITE_FLUSHERS": "3"}).write_flushers == 1
    for flushers, pool in ((0, 16), (16, 16)):  # none, or so many that reads find no connection
        with pytest.raises(ValueError, match="WRITE_FLUSHERS"):
            Settings.load({"write_flushers": flushers, "pool_size": pool}, {})
