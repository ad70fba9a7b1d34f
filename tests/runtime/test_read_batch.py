"""Coalesced reads answer exactly what each read alone answers, and one caller's trouble stays its own.

Concurrent FetchOffsets of different groups ride one statement (runtime/_read_batch.py).
The reference is the storage core's read run alone on a connection of its own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from offsetstore import storage
from offsetstore.core.errors import GroupChangedError, InvalidArgumentError, StoreUnavailableError
from offsetstore.core.types import FetchResult, OffsetCommit
from offsetstore.runtime._read_batch import BATCHED_FETCH
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.store import Store, deadline
from tests.fixtures.coalesced_reads import TableLock, executions, with_store
from tests.fixtures.storage import engine_of


def fresh(tag: str) -> str:
    return f"rb-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def groups(store: Store) -> Iterator[dict[str, str]]:
    """Groups of every shape a page of offsets can have."""
    made = {name: fresh(name) for name in ("one", "many", "metadata", "mixed", "unknown", "joined", "deleted")}
    store.commit_offsets(made["one"], [OffsetCommit("t", 0, 5)])
    store.commit_offsets(made["many"], [OffsetCommit(f"t{t}", p, p * 10 + t) for t in range(3) for p in range(7)])
    store.commit_offsets(made["metadata"], [OffsetCommit("m", p, p, "x" * 40 + "é'\"") for p in range(4)])
    store.commit_offsets(
        made["mixed"], [OffsetCommit("a-topic", 0, 0), OffsetCommit("Z", 3, 1), OffsetCommit("_x", 1, 1)]
    )
    store.join_group(made["joined"])
    store.join_group(made["joined"])
    store.commit_offsets(made["joined"], [OffsetCommit("j", 1, 2)], generation=2)
    store.commit_offsets(made["deleted"], [OffsetCommit("d", 0, 1)])
    store.delete_offsets(made["deleted"], all_topics=True)
    yield made


def alone(store: Store, group_id: str, page_size: int = 0, page_token: str = "") -> FetchResult:
    """The read by itself: the storage core's statement on a connection of its own."""
    page = storage.PageRequest(page_size, page_token, store.max_response_bytes, store.token_key())
    with engine_of(store).connect() as conn:
        return storage.fetch_offsets(conn, group_id, None, page)


async def batched_executions(hot: AsyncStore) -> int:
    """How often the coalesced fetch ran on the hot pool's one connection."""
    return await executions(hot, BATCHED_FETCH)


def test_a_batch_of_reads_answers_what_each_read_alone_answers(store: Store, groups: dict[str, str]) -> None:
    first_page = alone(store, groups["many"], page_size=5)
    calls = [(g, 0, "") for g in groups.values()] + [
        (groups["many"], 5, ""),
        (groups["many"], 5, first_page.next_page_token),
        (groups["many"], 100, ""),
    ]
    expected = [alone(store, g, size, token) for g, size, token in calls]

    async def scenario(hot: AsyncStore) -> tuple[list[FetchResult], int]:
        await hot.fetch_offsets(groups["one"])  # the page-token key is read, and the statement prepared
        before = await batched_executions(hot)
        got = await asyncio.gather(*(hot.fetch_offsets(g, page_size=s, page_token=t) for g, s, t in calls))
        return list(got), await batched_executions(hot) - before

    got, statements = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert got == expected
    assert 1 <= statements < len(calls)  # they rode fewer statements than there were reads
    assert expected[1].offsets and not expected[4].offsets  # the shapes are what they say
    assert expected[5].generation == 2


def test_a_lone_read_is_one_statement(store: Store, groups: dict[str, str]) -> None:
    async def scenario(hot: AsyncStore) -> tuple[FetchResult, int]:
        await hot.fetch_offsets(groups["one"])
        before = await batched_executions(hot)
        got = await hot.fetch_offsets(groups["many"])
        return got, await batched_executions(hot) - before

    got, statements = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert got == alone(store, groups["many"])
    assert statements == 1


def test_one_callers_bad_page_token_fails_that_caller_alone(store: Store, groups: dict[str, str]) -> None:
    token = alone(store, groups["many"], page_size=5).next_page_token
    store.commit_offsets(groups["joined"], [OffsetCommit("j", 2, 2)], generation=2)
    stale = alone(store, groups["joined"], page_size=1)
    assert stale.next_page_token
    store.join_group(groups["joined"])  # the token's generation is no longer the group's

    async def scenario(hot: AsyncStore) -> list[object]:
        await hot.fetch_offsets(groups["one"])
        return await asyncio.gather(
            hot.fetch_offsets(groups["many"], page_size=5, page_token=token),
            hot.fetch_offsets(groups["joined"], page_size=1, page_token=stale.next_page_token),
            hot.fetch_offsets(groups["many"], page_size=5, page_token="not a token"),
            hot.fetch_offsets(groups["one"]),
            return_exceptions=True,
        )

    paged, changed, garbage, one = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert paged == alone(store, groups["many"], page_size=5, page_token=token)
    assert isinstance(changed, GroupChangedError)
    with pytest.raises(GroupChangedError):  # as the read alone fails
        alone(store, groups["joined"], page_size=1, page_token=stale.next_page_token)
    assert isinstance(garbage, InvalidArgumentError)
    assert one == alone(store, groups["one"])


def test_a_callers_cancellation_or_deadline_leaves_the_others_their_answers(
    store: Store, groups: dict[str, str], database_url: str
) -> None:
    conninfo = database_url.replace("postgresql+psycopg://", "postgresql://")

    async def scenario(hot: AsyncStore) -> list[object]:
        await hot.fetch_offsets(groups["one"])
        lock = TableLock(conninfo)
        try:
            first = asyncio.create_task(hot.fetch_offsets(groups["one"]))  # in the database, waiting
            await lock.waiters(conninfo, 1)
            # These gather behind it: one is cancelled, one runs out of time while waiting.
            cancelled = asyncio.create_task(hot.fetch_offsets(groups["many"]))
            others = [asyncio.create_task(hot.fetch_offsets(g)) for g in (groups["metadata"], groups["mixed"])]

            async def pressed() -> FetchResult:
                with deadline(0.3):
                    return await hot.fetch_offsets(groups["joined"])

            late = asyncio.create_task(pressed())
            await asyncio.sleep(0)
            cancelled.cancel()
            late_error = await asyncio.gather(late, return_exceptions=True)
        finally:
            lock.release()
        results = await asyncio.gather(first, cancelled, *others, return_exceptions=True)
        return [*late_error, *results]

    late, first, cancelled, metadata, mixed = with_store(store, scenario, hot_pool_size=1, read_flushers=1)
    assert isinstance(late, StoreUnavailableError)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert first == alone(store, groups["one"])
    assert metadata == alone(store, groups["metadata"])
    assert mixed == alone(store, groups["mixed"])
