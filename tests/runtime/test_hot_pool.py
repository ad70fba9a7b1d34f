"""A connection killed while idle costs no call, and the hot path pays no round trip to find out.

The hot pool checks a connection with a round trip only where its socket says the server
ended it (or it sat idle long): runtime/_hot_pool.py. One killed between the check and its
statement gets one more attempt on a fresh connection, for a read or a write that never
sent COMMIT, and none otherwise.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

import psycopg
import pytest

from offsetstore.core.errors import StoreUnavailableError
from offsetstore.core.types import OffsetCommit
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.store import Store
from tests.fixtures.coalesced_reads import with_store

R = TypeVar("R")


# ``scenario(hot)`` on an AsyncStore of its own over ``store``'s database: the coalesced reads' helper.
run = with_store


async def terminate(conninfo: str, pid: int) -> None:
    """Ends backend ``pid`` and waits until it is gone."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as killer:
        await killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        while await (await killer.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))).fetchone():
            await asyncio.sleep(0.01)


@pytest.fixture
def conninfo(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://")


async def pooled_pids(hot: AsyncStore) -> set[int]:
    async with hot.hot.connection() as conn:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return {int(row[0])}


def test_a_connection_killed_while_idle_is_replaced_and_the_calls_are_served(
    store: Store, group_id: str, conninfo: str
) -> None:
    async def scenario(hot: AsyncStore) -> tuple[int, int, int, int]:
        await hot.commit_offsets(group_id, [OffsetCommit("t", 0, 1)])
        (pid,) = await pooled_pids(hot)
        await terminate(conninfo, pid)
        fetched = await hot.fetch_offsets(group_id)
        (replaced,) = await pooled_pids(hot)
        await terminate(conninfo, replaced)
        written = await hot.commit_offsets(group_id, [OffsetCommit("t", 0, 2)])
        return pid, replaced, fetched.offsets[next(iter(fetched.offsets))].offset, written[0].offset

    pid, replaced, fetched, written = run(store, scenario, hot_pool_size=1)
    assert replaced != pid
    assert (fetched, written) == (1, 2)


def test_a_connection_lost_under_a_statement_is_retried_once_only_where_nothing_was_applied(
    store: Store, conninfo: str
) -> None:
    async def scenario(hot: AsyncStore) -> tuple[object, object, int]:
        calls = 0

        async def body() -> str:
            nonlocal calls
            calls += 1
            if calls % 2:  # every first attempt: its connection dies under it
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await terminate(conninfo, conn.info.backend_pid)
                    await conn.execute("SELECT 1")
            return "served"

        again = await hot.attempts("read", body, unapplied=lambda: True)
        calls = 0
        unknown = await asyncio.gather(hot.attempts("write", body, unapplied=lambda: False), return_exceptions=True)
        return again, unknown[0], calls

    again, unknown, calls = run(store, scenario, hot_pool_size=1)
    assert again == "served"
    assert isinstance(unknown, StoreUnavailableError)  # the outcome could be unknown: no second attempt
    assert calls == 1
