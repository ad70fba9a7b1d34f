"""Group commit: concurrent commits and joins share a transaction, and each keeps its own answer.

A batch is made deterministic by holding one group's row lock from another session: the
store's only flusher waits on it while the next requests queue up behind it, and all of
them go into the next batch. Commits of one batch share their statement's
``statement_timestamp()``, which is how a test sees that they were written together.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

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
from offsetstore.runtime.store import Store, deadline
from offsetstore.storage.engine import create_engine
from tests.fixtures.concurrency import wait_until
from tests.fixtures.fix_db import group_locked

TOPIC = "orders"


def fresh(prefix: str = "gc") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


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
def one_flusher(database_url: str) -> Iterator[Store]:
    store = Store(create_engine(database_url, pool_size=4, statement_timeout_ms=60_000), write_flushers=1)
    yield store
    store.dispose()


def submit_while_blocked(store: Store, database_url: str, calls: list[Callable[[], Any]]) -> list[Future[Any]]:
    """Runs ``calls`` so that they all land in one batch: queued while the only flusher is busy."""
    blocker = fresh("blocker")
    store.commit_offsets(blocker, [OffsetCommit(TOPIC, 0, 1)])
    pool = ThreadPoolExecutor(max_workers=len(calls) + 1)
    try:
        with group_locked(database_url, blocker) as lock:
            held = pool.submit(store.commit_offsets, blocker, [OffsetCommit(TOPIC, 0, 2)])
            wait_until(lambda: lock.waiting() == 1)  # the flusher now waits in the database
            futures = [pool.submit(call) for call in calls]
            wait_until(lambda: store.writes.queued() == len(calls))
            lock.release()
        held.result(30)
        for f in futures:
            f.exception(30)
        return futures
    finally:
        pool.shutdown(wait=True)


def test_concurrent_commits_share_one_transaction_and_keep_their_own_answers(
    one_flusher: Store, database_url: str, engine: sa.Engine
) -> None:
    store = one_flusher
    fenced, mismatched, good_a, good_b, joined = (fresh() for _ in range(5))
    store.commit_offsets(fenced, [OffsetCommit(TOPIC, 0, 1)])
    generation = store.join_group(fenced)
    store.commit_offsets(mismatched, [OffsetCommit(TOPIC, 0, 7)])

    futures = submit_while_blocked(
        store,
        database_url,
        [
            lambda: store.commit_offsets(fenced, [OffsetCommit(TOPIC, 0, 2)], generation=generation + 5),
            lambda: store.commit_offsets(mismatched, [OffsetCommit(TOPIC, 0, 8, expected_offset=6)]),
            lambda: store.commit_offsets(good_a, [OffsetCommit(TOPIC, 0, 100)]),
            lambda: store.commit_offsets(good_b, [OffsetCommit(TOPIC, 3, 200, expected_offset=-1)]),
            lambda: store.join_group(joined),
        ],
    )
    stale, mismatch, a, b, join = futures
    assert isinstance(stale.exception(), StaleGenerationError)
    assert isinstance(mismatch.exception(), OffsetMismatchError)
    committed_a: list[CommittedOffset] = a.result()
    committed_b: list[CommittedOffset] = b.result()
    assert committed_a[0].offset == 100 and committed_b[0].offset == 200
    assert join.result() == 1
    # One statement wrote both: they share its statement_timestamp().
    assert committed_a[0].commit_time == committed_b[0].commit_time
    assert store.fetch_offsets(fenced).offsets[TopicPartition(TOPIC, 0)].offset == 1
    assert store.fetch_offsets(mismatched).offsets[TopicPartition(TOPIC, 0)].offset == 7
    assert [k for k, _, _ in history(engine, fenced)] == [int(ChangeKind.COMMIT)]


def test_a_batch_stuck_on_one_locked_group_still_commits_the_others(one_flusher: Store, database_url: str) -> None:
    store = one_flusher
    locked, free = fresh(), fresh()
    store.commit_offsets(locked, [OffsetCommit(TOPIC, 0, 1)])
    outcome: dict[str, Any] = {}

    def commit(group: str, seconds: float) -> None:
        try:
            with deadline(seconds):
                outcome[group] = store.commit_offsets(group, [OffsetCommit(TOPIC, 0, 2)])
        except StoreUnavailableError as error:
            outcome[group] = error

    blocker = fresh("blocker")
    store.commit_offsets(blocker, [OffsetCommit(TOPIC, 0, 1)])
    with group_locked(database_url, locked) as lock:
        with group_locked(database_url, blocker) as gate:
            held = threading.Thread(target=commit, args=(blocker, 60))
            held.start()
            wait_until(lambda: gate.waiting() == 1)
            threads = [threading.Thread(target=commit, args=(g, s)) for g, s in ((locked, 1.5), (free, 60))]
            for t in threads:
                t.start()
            wait_until(lambda: store.writes.queued() == 2)
            gate.release()
        started = time.monotonic()
        for t in threads:
            t.join(60)
        held.join(60)
        # The batch's statement timeout was the pressed caller's; the free group then ran alone.
        assert time.monotonic() - started < 30
        assert lock.waiting() == 0
    assert isinstance(outcome[locked], StoreUnavailableError)
    assert isinstance(outcome[free], list) and outcome[free][0].offset == 2
    assert store.fetch_offsets(locked).offsets[TopicPartition(TOPIC, 0)].offset == 1


def test_a_caller_gone_before_commit_is_taken_out_and_the_batch_redone(one_flusher: Store, database_url: str) -> None:
    store = one_flusher
    leaving, staying = fresh(), fresh()
    there = threading.Event()
    there.set()
    outcome: dict[str, Any] = {}

    def commit(group: str, is_active: Callable[[], bool]) -> None:
        try:
            with deadline(60, is_active):
                outcome[group] = store.commit_offsets(group, [OffsetCommit(TOPIC, 0, 5)])
        except StoreUnavailableError as error:
            outcome[group] = error

    blocker = fresh("blocker")
    store.commit_offsets(blocker, [OffsetCommit(TOPIC, 0, 1)])
    store.commit_offsets(leaving, [OffsetCommit(TOPIC, 0, 1)])
    with group_locked(database_url, blocker) as gate:
        held = threading.Thread(target=commit, args=(blocker, lambda: True))
        held.start()
        wait_until(lambda: gate.waiting() == 1)
        with group_locked(database_url, leaving) as lock:
            threads = [
                threading.Thread(target=commit, args=(leaving, there.is_set)),
                threading.Thread(target=commit, args=(staying, lambda: True)),
            ]
            for t in threads:
                t.start()
            wait_until(lambda: store.writes.queued() == 2)
            gate.release()
            wait_until(lambda: lock.waiting() == 1)  # the batch waits on the leaving caller's group
            there.clear()
            lock.release()
        for t in threads:
            t.join(60)
        held.join(60)
    assert isinstance(outcome[leaving], StoreUnavailableError)
    assert isinstance(outcome[staying], list)
    assert store.fetch_offsets(leaving).offsets[TopicPartition(TOPIC, 0)].offset == 1
    assert store.fetch_offsets(staying).offsets[TopicPartition(TOPIC, 0)].offset == 5


def test_write_flushers_are_read_from_flags_and_environment_and_bounded_by_the_pool() -> None:
    from offsetstore.server.config import Settings

    assert Settings.load({}, {}).write_flushers == 2
    assert Settings.load({}, {"OFFSETSTORE_WRITE_FLUSHERS": "3"}).write_flushers == 3
    assert Settings.load({"write_flushers": 1}, {"OFFSETSTORE_WRITE_FLUSHERS": "3"}).write_flushers == 1
    for flushers, pool in ((0, 16), (16, 16)):  # none, or so many that reads find no connection
        with pytest.raises(ValueError, match="WRITE_FLUSHERS"):
            Settings.load({"write_flushers": flushers, "pool_size": pool}, {})
