"""Wide statements are planned for their arguments, not with a plan cached for small ones.

After five executions of a prepared statement PostgreSQL may keep a generic plan, made for
a guessed array size and for the tables' sizes at the time. In the suite's CI run a page of
a 10,000-partition fetch on such a plan took 1.2 s instead of 40 ms, and a 10,000-partition
compare-and-set commit ran past the statement timeout. The server's hot pool keeps cached
plans for small statements (planning is a large part of a small commit) and runs a wide one
unprepared; ``pg_prepared_statements`` shows which way each execution went.
"""

from __future__ import annotations

import asyncio
import dataclasses

from offsetstore.core.types import OffsetCommit
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.store import Store
from offsetstore.storage.steps import WIDE
from tests.fixtures.storage import engine_of


def test_the_hot_pool_runs_a_wide_fetch_unprepared_and_a_narrow_one_prepared(store: Store, group_id: str) -> None:
    topic = "t-wide"
    store.commit_offsets(group_id, [OffsetCommit(topic, p, p + 1) for p in range(2 * WIDE)])

    async def scenario() -> tuple[int, int, int, str]:
        # one connection: its prepared statements are the ones read
        hot = AsyncStore(dataclasses.replace(store.config, hot_pool_size=1))
        await hot.open()
        try:
            for _ in range(8):
                await hot.fetch_offsets(group_id, {topic: range(3)})
            narrow = await _fetch_executions(hot)
            wide = await hot.fetch_offsets(group_id, {topic: range(2 * WIDE)})
            after_wide = await _fetch_executions(hot)
            await hot.fetch_offsets(group_id, {topic: range(3)})
            after_narrow = await _fetch_executions(hot)
            async with hot.hot.connection() as conn:
                mode = (await (await conn.execute("SHOW plan_cache_mode")).fetchone())[0]
            assert len(wide.offsets) == 2 * WIDE
            return narrow, after_wide, after_narrow, mode
        finally:
            await hot.close()

    narrow, after_wide, after_narrow, mode = asyncio.run(scenario())
    assert narrow == 8
    assert after_wide == narrow  # the wide fetch did not run on the prepared statement
    assert after_narrow == narrow + 1
    assert mode == "auto"  # the hot pool keeps cached plans for small statements


def test_the_stores_other_sessions_plan_every_statement_for_its_arguments(store: Store) -> None:
    with engine_of(store).connect() as conn:
        assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == "force_custom_plan"


async def _fetch_executions(hot: AsyncStore) -> int:
    """How often the prepared fetch of named partitions ran (generic and custom plans)."""
    async with hot.hot.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements"
                " WHERE statement LIKE '%%unnest(%%' AND statement LIKE '%%AS n(topic, partition)%%'"
            )
        ).fetchone()
    return int(row[0])
