"""The group commit's batches are shared out between principals (issue 56, H2): the rule, the flushers, the store.

One tenant's wide commits (999 partitions a call, from eight threads) used to fill every batch,
first come first served, and another tenant's one-partition commits rode in them. The queue
now gives each principal its share of the flushers while others are active, and a wide
request goes in a batch of its own principal's only; with one principal it is the old queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from offsetstore import storage
from offsetstore.client import OffsetCommit
from offsetstore.runtime import _group_commit as gc
from offsetstore.runtime._flushers import Flushers
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store, deadline
from offsetstore.storage.engine import SessionSettings
from tests.fixtures.group_commit import Batches, at_once, fresh, turns


class Call(gc.Waiting):
    """A request as the queue sees it, named for the assertions."""

    def __init__(self, name: str, principal: str, offsets: int) -> None:
        commits = [OffsetCommit("t", p, 1) for p in range(offsets)]
        super().__init__(storage.CommitRequest(f"g-{name}", commits), None, principal)
        self.name = name

    def finish(self, outcome: gc.Handed) -> None:
        pass


def names(batch: list[Call]) -> list[str]:
    return [call.name for call in batch]


def queue_of(*calls: Call, flushers: int = 2) -> gc.FairQueue[Call]:
    queue: gc.FairQueue[Call] = gc.FairQueue(flushers)
    for call in calls:
        queue.append(call)
    return queue


# --- the rule -------------------------------------------------------------------------------


def test_one_principal_is_first_come_first_served_up_to_the_limits() -> None:
    calls = [Call(f"c{i}", "", 1) for i in range(600)] + [Call("wide", "", 999)]
    queue = queue_of(*calls)
    first = queue.take()
    assert names(first) == [f"c{i}" for i in range(gc.MAX_BATCH_REQUESTS)]
    # Alone, a principal has every flusher, and its wide request joins its narrow ones.
    assert names(queue.take()) == [f"c{i}" for i in range(gc.MAX_BATCH_REQUESTS, 600)] + ["wide"]
    assert len(queue) == 0


def test_principals_take_turns_in_a_batch() -> None:
    queue = queue_of(*(Call(f"a{i}", "a", 1) for i in range(600)), Call("b0", "b", 1), Call("b1", "b", 1))
    batch = names(queue.take())
    # First come first served, b's calls waited behind 512 of a's; in turns they are in the first batch.
    assert batch[:4] == ["a0", "b0", "a1", "b1"] and len(batch) == gc.MAX_BATCH_REQUESTS


def test_a_wide_request_shares_its_batch_with_no_other_principal() -> None:
    wide = [Call(f"w{i}", "wide", 999) for i in range(8)]
    queue = queue_of(*wide, Call("small", "small", 1), flushers=3)
    assert names(queue.take()) == [f"w{i}" for i in range(8)]  # 7,992 offsets: without small
    assert names(queue.take()) == ["small"]


def test_a_principal_holds_its_share_of_the_flushers_while_another_is_active() -> None:
    queue = queue_of(*(Call(f"w{i}", "wide", 999) for i in range(16)))
    wide_batch = queue.take()
    assert names(wide_batch) == [f"w{i}" for i in range(10)]  # up to 10,000 offsets
    queue.append(Call("small", "small", 1))
    # The wide batch in the database holds the wide tenant's share (one of two flushers):
    # the next batch is the other tenant's, and it should not wait for the wide one to return.
    assert queue.urgent()
    small_batch = queue.take()
    assert names(small_batch) == ["small"]
    assert not queue.take()  # nothing it may take: the wide tenant's share is in use
    queue.returned(wide_batch)
    assert names(queue.take()) == [f"w{i}" for i in range(10, 16)]
    queue.returned(small_batch)


def test_a_principal_alone_has_every_flusher() -> None:
    queue = queue_of(*(Call(f"w{i}", "wide", 999) for i in range(16)))
    assert len(queue.take()) == 10
    assert len(queue.take()) == 6
    assert not queue.urgent()


# --- the flushers: a held-back queue waits, a call behind a wide batch goes at once ----------


def test_the_flushers_keep_a_flusher_for_another_principal_behind_a_wide_batch() -> None:
    async def scenario() -> list[list[str]]:
        seen: list[list[str]] = []
        released = asyncio.Event()

        async def flush(batch: list[Call]) -> None:
            seen.append(names(batch))
            if batch[0].principal == "wide":
                await released.wait()

        flushers: Flushers[Call] = Flushers("test", 2, gc.FairQueue(2), flush)
        for i in range(4):
            flushers.put(Call(f"w{i}", "wide", 999))
        await turns()
        assert seen == [["w0", "w1", "w2", "w3"]]
        flushers.put(Call("small", "small", 1))
        for i in range(4, 8):
            flushers.put(Call(f"w{i}", "wide", 999))
        await turns()
        # One call queued behind a batch of four: the gather rule alone would wait for it to return.
        assert seen[1:] == [["small"]]
        await turns()
        assert len(seen) == 2  # the second flusher took nothing of the wide tenant's: held back
        released.set()
        await flushers.stop()
        return seen

    assert asyncio.run(scenario())[2:] == [["w4", "w5", "w6", "w7"]]


# --- the store, on PostgreSQL ----------------------------------------------------------------


@pytest.fixture
def batches() -> Batches:
    return Batches()


@pytest.fixture
def two_flushers(database_url: str, batches: Batches) -> Iterator[Store]:
    store = Store.open(
        StoreConfig(
            database_url,
            SessionSettings(statement_timeout_ms=60_000),
            hot_pool_size=4,
            write_flushers=2,
            carry=batches.carry(),
        )
    )
    yield store
    store.dispose()


def as_principal(principal: str, call: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    async def named() -> Any:
        with deadline(60, principal=principal):
            return await call()

    return named


def test_a_one_partition_commit_is_not_written_in_another_principals_wide_batch(
    two_flushers: Store, batches: Batches
) -> None:
    aio = two_flushers.aio
    wide_groups = {f"wide-{i}": fresh() for i in range(6)}
    calls = {
        name: as_principal("wide", lambda g=group: aio.commit_offsets(g, [OffsetCommit("t", p, 5) for p in range(999)]))
        for name, group in wide_groups.items()
    }
    small = fresh()
    calls["small"] = as_principal("small", lambda: aio.commit_offsets(small, [OffsetCommit("t", 0, 7)]))
    outcome = at_once(two_flushers, calls)
    # First come first served, all seven were one transaction of 5,995 offsets.
    assert sorted(batches.seen) == [(["small"], None), (sorted(wide_groups), None)]
    assert all(isinstance(outcome[name], list) and len(outcome[name]) == 999 for name in wide_groups)
    assert outcome["small"][0].offset == 7


def test_one_principals_wide_and_narrow_commits_still_share_a_transaction(
    two_flushers: Store, batches: Batches
) -> None:
    aio = two_flushers.aio
    wide, narrow = fresh(), fresh()
    outcome = at_once(
        two_flushers,
        {
            "wide": as_principal(
                "one", lambda: aio.commit_offsets(wide, [OffsetCommit("t", p, 1) for p in range(999)])
            ),
            "narrow": as_principal("one", lambda: aio.commit_offsets(narrow, [OffsetCommit("t", 0, 3)])),
        },
    )
    assert batches.seen == [(["narrow", "wide"], None)]
    assert outcome["narrow"][0].offset == 3 and len(outcome["wide"]) == 999
