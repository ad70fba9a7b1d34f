"""Coalesced descriptions answer exactly what each DescribeGroup alone answers, and one caller's trouble stays its own.

Concurrent DescribeGroup calls of different groups ride one statement, as FetchOffsets do
(runtime/_read_batch.py); what a description asks for after its page (lag histories, the
group's verdict over more than one page) it asks alone. The reference is the storage
core's description run alone on a connection of its own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from offsetstore import storage
from offsetstore.core.errors import (
    GroupChangedError,
    GroupNotFoundError,
    InvalidArgumentError,
    OffsetStoreError,
    StoreUnavailableError,
)
from offsetstore.core.types import GroupDescription, GroupStatus, OffsetCommit, Watermark
from offsetstore.runtime._read_batch import BATCHED_FETCH, describe_kinds
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.store import Store, deadline
from offsetstore.storage.status import DEFAULT_RULES
from tests.fixtures.coalesced_reads import TableLock, executions, until_queued, with_store
from tests.fixtures.storage import engine_of

#: The coalesced description (the same text with lag history or without).
BATCHED_DESCRIBE = describe_kinds(DEFAULT_RULES.window)[0].batched

Call = tuple[str, int, str, bool]  # group, page size, page token, lag history


def fresh(tag: str) -> str:
    return f"db-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def groups(store: Store) -> Iterator[dict[str, str]]:
    """Groups of every shape a description can have."""
    made = {name: fresh(name) for name in ("one", "many", "metadata", "empty", "unknown", "deleted", "lagging")}
    store.commit_offsets(made["one"], [OffsetCommit("t", 0, 5)])
    store.commit_offsets(made["many"], [OffsetCommit(f"t{t}", p, p * 10 + t) for t in range(3) for p in range(7)])
    store.commit_offsets(made["metadata"], [OffsetCommit("m", p, p, "x" * 40 + "é'\"") for p in range(4)])
    store.join_group(made["empty"])
    store.commit_offsets(made["deleted"], [OffsetCommit("d", 0, 1)])
    store.join_group(made["deleted"])
    store.delete_offsets(made["deleted"], all_topics=True)
    # Log ends sampled while it lagged, then caught up: a lag history, and a lag in seconds that is 0 at any time.
    topic = fresh("topic")
    store.commit_offsets(made["lagging"], [OffsetCommit(topic, p, 50) for p in range(2)])
    store.report_watermarks([Watermark(topic, p, 0, 100) for p in range(2)])
    store.commit_offsets(made["lagging"], [OffsetCommit(topic, p, 100) for p in range(2)])
    yield made


def alone(store: Store, call: Call) -> GroupDescription | OffsetStoreError:
    """The description by itself: the storage core's statements on a connection of their own."""
    group_id, page_size, page_token, lag_history = call
    page = storage.PageRequest(page_size, page_token, store.max_response_bytes, store.token_key())
    with engine_of(store).connect() as conn:
        try:
            return storage.describe_group(conn, group_id, page, DEFAULT_RULES, lag_history)
        except OffsetStoreError as error:
            return error


def answer(outcome: object) -> object:
    """What a caller hears: the description, or the error's type, message and metadata."""
    if isinstance(outcome, OffsetStoreError):
        return type(outcome), str(outcome), outcome.metadata
    return outcome


def describe(hot: AsyncStore, call: Call) -> asyncio.Task[GroupDescription]:
    group_id, page_size, page_token, lag_history = call
    return asyncio.create_task(
        hot.describe_group(group_id, page_size=page_size, page_token=page_token, lag_history=lag_history)
    )


def test_a_batch_of_descriptions_answers_what_each_description_alone_answers(
    store: Store, groups: dict[str, str]
) -> None:
    first_page = alone(store, (groups["many"], 5, "", False))
    assert isinstance(first_page, GroupDescription) and first_page.next_page_token
    calls: list[Call] = [(g, 0, "", False) for g in groups.values()] + [
        (groups["many"], 5, "", False),  # a first page with more after it: the group's verdict asked alone
        (groups["many"], 5, first_page.next_page_token, False),
        (groups["many"], 100, "", False),
        (groups["lagging"], 0, "", True),  # lag histories asked alone
        (groups["one"], 0, "", True),
        (groups["unknown"], 0, "", True),
        (groups["many"], 5, "", True),
    ]
    expected = [answer(alone(store, call)) for call in calls]

    async def scenario(hot: AsyncStore) -> tuple[list[object], int]:
        await hot.describe_group(groups["one"])  # the page-token key is read
        before = await executions(hot, BATCHED_DESCRIBE)
        got = await asyncio.gather(*(describe(hot, call) for call in calls), return_exceptions=True)
        return [answer(g) for g in got], await executions(hot, BATCHED_DESCRIBE) - before

    got, statements = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert got == expected
    assert 2 <= statements < len(calls)  # fewer statements than calls (two kinds: with lag history and without)
    # The shapes are what they say.
    by_group = dict(zip([c[0] for c in calls], expected, strict=False))
    assert by_group[groups["unknown"]][0] is GroupNotFoundError
    deleted = by_group[groups["deleted"]]
    assert deleted[0] is GroupNotFoundError and deleted[2]["deleted"] == "true" and deleted[2]["generation"] == "2"
    empty = by_group[groups["empty"]]
    assert isinstance(empty, GroupDescription) and empty.generation == 1 and not empty.partitions
    paged = expected[len(groups)]
    assert isinstance(paged, GroupDescription) and paged.next_page_token and paged.status != GroupStatus.UNSPECIFIED
    lagging = expected[len(groups) + 3]
    assert isinstance(lagging, GroupDescription) and all(p.lag_history for p in lagging.partitions)


def test_a_lone_description_is_one_statement_and_its_lag_histories_one_more(
    store: Store, groups: dict[str, str]
) -> None:
    async def scenario(hot: AsyncStore) -> list[tuple[GroupDescription, int, int]]:
        await hot.describe_group(groups["one"])
        outcomes = []
        for lag_history in (False, True):
            before, batched = await executions(hot), await executions(hot, BATCHED_DESCRIBE)
            got = await hot.describe_group(groups["lagging"], lag_history=lag_history)
            outcomes.append((got, await executions(hot) - before, await executions(hot, BATCHED_DESCRIBE) - batched))
        return outcomes

    (plain, statements, batched), (with_history, more, batched_too) = with_store(
        store, scenario, hot_pool_size=1, read_flushers=1
    )
    assert plain == alone(store, (groups["lagging"], 0, "", False))
    assert with_history == alone(store, (groups["lagging"], 0, "", True))
    assert (statements, batched) == (1, 1)
    assert (more, batched_too) == (2, 1)  # the page, then the lag histories on their own


def test_one_callers_stale_page_token_fails_that_caller_alone(store: Store, groups: dict[str, str]) -> None:
    many = alone(store, (groups["many"], 5, "", False))
    assert isinstance(many, GroupDescription)
    paged = fresh("paged")
    store.commit_offsets(paged, [OffsetCommit("p", p, 1) for p in range(3)])
    stale = alone(store, (paged, 1, "", False))
    assert isinstance(stale, GroupDescription) and stale.next_page_token
    store.join_group(paged)  # the token's generation is no longer the group's
    calls: list[Call] = [
        (groups["many"], 5, many.next_page_token, False),
        (paged, 1, stale.next_page_token, False),
        (groups["many"], 5, "not a token", False),
        (groups["one"], 0, "", False),
        (groups["unknown"], 0, "", False),
    ]

    async def scenario(hot: AsyncStore) -> list[object]:
        await hot.describe_group(groups["one"])
        return list(await asyncio.gather(*(describe(hot, call) for call in calls), return_exceptions=True))

    got = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert [answer(g) for g in got] == [answer(alone(store, call)) for call in calls]
    assert isinstance(got[1], GroupChangedError)
    assert isinstance(got[2], InvalidArgumentError)


def test_fetches_and_descriptions_queued_together_ride_batches_of_their_own(
    store: Store, groups: dict[str, str], database_url: str
) -> None:
    conninfo = database_url.replace("postgresql+psycopg://", "postgresql://")
    describes: list[Call] = [
        (groups["one"], 0, "", False),
        (groups["metadata"], 0, "", False),
        (groups["lagging"], 0, "", True),
        (groups["many"], 5, "", False),
    ]
    fetches = [groups["many"], groups["metadata"]]

    async def scenario(hot: AsyncStore) -> tuple[list[object], list[object], int, int]:
        await hot.fetch_offsets(groups["one"])
        fetched, described = await executions(hot, BATCHED_FETCH), await executions(hot, BATCHED_DESCRIBE)
        lock = TableLock(conninfo)
        try:
            first = asyncio.create_task(hot.fetch_offsets(groups["one"]))  # in the database, waiting
            await lock.waiters(conninfo, 1)
            # Queued behind it, kinds interleaved: description, fetch, description (with lag history), ...
            tasks = [describe(hot, describes[0]), asyncio.create_task(hot.fetch_offsets(fetches[0]))]
            tasks += [describe(hot, describes[1]), describe(hot, describes[2])]
            tasks += [asyncio.create_task(hot.fetch_offsets(fetches[1])), describe(hot, describes[3])]
            await until_queued(hot, len(tasks))
        finally:
            lock.release()
        got = await asyncio.gather(first, *tasks, return_exceptions=True)
        return (
            [got[0], got[2], got[5]],
            [got[1], got[3], got[4], got[6]],
            await executions(hot, BATCHED_FETCH) - fetched,
            await executions(hot, BATCHED_DESCRIBE) - described,
        )

    fetched, described, fetch_statements, describe_statements = with_store(
        store, scenario, hot_pool_size=1, read_flushers=1
    )
    with engine_of(store).connect() as conn:
        page = storage.PageRequest(0, "", store.max_response_bytes, store.token_key())
        assert fetched == [storage.fetch_offsets(conn, g, None, page) for g in (groups["one"], *fetches)]
    assert [answer(d) for d in described] == [answer(alone(store, call)) for call in describes]
    # The first fetch alone, then the three descriptions without lag history, the two fetches,
    # the description with it: a batch of each kind, in the order the kinds were queued.
    assert fetch_statements == 2
    assert describe_statements == 2


def test_a_callers_cancellation_or_deadline_leaves_the_other_descriptions_their_answers(
    store: Store, groups: dict[str, str], database_url: str
) -> None:
    conninfo = database_url.replace("postgresql+psycopg://", "postgresql://")

    async def scenario(hot: AsyncStore) -> list[object]:
        await hot.describe_group(groups["one"])
        lock = TableLock(conninfo)
        try:
            first = asyncio.create_task(hot.describe_group(groups["one"]))  # in the database, waiting
            await lock.waiters(conninfo, 1)
            # These gather behind it: one is cancelled, one runs out of time while waiting.
            cancelled = asyncio.create_task(hot.describe_group(groups["many"]))
            others = [
                asyncio.create_task(hot.describe_group(groups["metadata"])),
                asyncio.create_task(hot.describe_group(groups["unknown"])),
            ]

            async def pressed() -> GroupDescription:
                with deadline(0.3):
                    return await hot.describe_group(groups["lagging"])

            late = asyncio.create_task(pressed())
            await until_queued(hot, 4)
            cancelled.cancel()
            late_error = await asyncio.gather(late, return_exceptions=True)
        finally:
            lock.release()
        results = await asyncio.gather(first, cancelled, *others, return_exceptions=True)
        return [*late_error, *results]

    late, first, cancelled, metadata, unknown = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert isinstance(late, StoreUnavailableError)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert first == alone(store, (groups["one"], 0, "", False))
    assert metadata == alone(store, (groups["metadata"], 0, "", False))
    assert answer(unknown) == answer(alone(store, (groups["unknown"], 0, "", False)))
