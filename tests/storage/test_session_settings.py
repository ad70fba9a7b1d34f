"""The store's settings hold in every transaction it runs, whatever the session's defaults say.

A pooler that drops startup parameters (PgBouncer rejects or ignores ``options``), or hands a
session to another client between transactions, leaves each transaction with the database's
defaults. Here those defaults are made as bad as they get (``synchronous_commit = off``, no
statement or lock timeout): every path of the store (the hot pool's commits and fetches, the
colder operations, the sinks' engine) must still commit synchronously and stay bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from offsetstore import storage
from offsetstore.core.errors import StoreUnavailableError
from offsetstore.core.types import OffsetCommit, ResetRequest
from offsetstore.runtime import migrate
from offsetstore.runtime._group_commit import BATCH_LOCK_TIMEOUT_MS
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.storage.database_url import conninfo, parse
from offsetstore.storage.engine import SessionSettings, create_engine

# Each statement that writes offsets notes the settings it ran under.
PROBE = """
CREATE TABLE public.settings_seen (app text, sync text, statement_timeout text, lock_timeout text);
CREATE FUNCTION public.note_settings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.settings_seen VALUES (current_setting('application_name'),
        current_setting('synchronous_commit'), current_setting('statement_timeout'), current_setting('lock_timeout'));
    RETURN NULL;
END $$;
CREATE TRIGGER note AFTER INSERT OR UPDATE ON offsetstore.offsets
    FOR EACH STATEMENT EXECUTE FUNCTION public.note_settings();
"""


@pytest.fixture
def careless_url(scratch_database_url: str) -> Iterator[str]:
    """A migrated database whose session defaults promise nothing: what a pooler that drops settings leaves."""
    url = scratch_database_url
    migrate.upgrade(url)
    dbname = parse(url)["dbname"]
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for setting in ("synchronous_commit = off", "statement_timeout = 0", "lock_timeout = 0"):
                conn.exec_driver_sql(f'ALTER DATABASE "{dbname}" SET {setting}')
            conn.exec_driver_sql(PROBE)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off", "the defaults apply"
    finally:
        engine.dispose()
    yield url


def _seen(url: str) -> set[tuple[str, str, str, str]]:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return {tuple(r) for r in conn.exec_driver_sql("SELECT * FROM public.settings_seen")}  # type: ignore[misc]
    finally:
        engine.dispose()


def _run(store: Store, scenario):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        hot = AsyncStore(dataclasses.replace(store.config, hot_pool_size=2))
        await hot.open()
        try:
            # Bounded here: a statement the store failed to bound would wait forever.
            return await asyncio.wait_for(scenario(hot), 60)
        finally:
            await hot.close()

    return asyncio.run(main())


@pytest.mark.parametrize("prepare", [True, False])
def test_every_commit_path_commits_synchronously_and_bounded(careless_url: str, group_id: str, prepare: bool) -> None:
    store = Store.open(
        StoreConfig(careless_url, SessionSettings(statement_timeout_ms=4000, prepare=prepare), hot_pool_size=2)
    )
    try:

        async def commits(hot: AsyncStore) -> None:
            await hot.commit_offsets(group_id, [OffsetCommit("t", 0, 1)])  # the hot pool's group commit
            await hot.reset_offsets(ResetRequest(group_id, {"t": [0]}, to_offset=0))  # the cold engine

        _run(store, commits)
        sinks = create_engine(careless_url, statement_timeout_ms=4000)
        try:
            with sinks.begin() as conn:  # the sinks' engine, in the caller's transaction
                storage.commit_offsets(conn, group_id, [OffsetCommit("t", 0, 5)])
        finally:
            sinks.dispose()
    finally:
        store.dispose()
    # The group commit's batch waits for a lock briefly (then each request runs alone, with 4 s).
    assert {(sync, timeout, lock) for _, sync, timeout, lock in _seen(careless_url)} == {
        ("on", "4s", "4s"),
        ("on", "4s", f"{BATCH_LOCK_TIMEOUT_MS}ms"),
    }


def test_a_fetch_a_commit_and_a_reset_stay_bounded_while_a_lock_holds_the_table(
    careless_url: str, group_id: str
) -> None:
    store = Store.open(StoreConfig(careless_url, SessionSettings(statement_timeout_ms=300), hot_pool_size=2))
    store.commit_offsets(group_id, [OffsetCommit("t", 0, 1)])
    try:
        with psycopg.connect(conninfo(careless_url)) as holder:
            holder.execute("LOCK TABLE offsetstore.offsets IN ACCESS EXCLUSIVE MODE")

            async def blocked(hot: AsyncStore) -> list[str]:
                outcomes = []
                for call in (
                    lambda: hot.fetch_offsets(group_id),
                    lambda: hot.commit_offsets(group_id, [OffsetCommit("t", 0, 2)]),
                    lambda: hot.reset_offsets(ResetRequest(group_id, {"t": [0]}, to_offset=0)),
                ):
                    try:
                        await call()
                        outcomes.append("ok")
                    except StoreUnavailableError:
                        outcomes.append("unavailable")
                return outcomes

            assert _run(store, blocked) == ["unavailable"] * 3
    finally:
        store.dispose()


def test_with_prepare_off_the_hot_pool_leaves_no_prepared_statement(careless_url: str, group_id: str) -> None:
    store = Store.open(StoreConfig(careless_url, SessionSettings(prepare=False), hot_pool_size=2))
    try:

        async def calls(hot: AsyncStore) -> int:
            for n in range(8):  # past psycopg's automatic preparing (5 executions)
                await hot.commit_offsets(group_id, [OffsetCommit("t", 0, n + 1)])
                await hot.fetch_offsets(group_id)
            count = 0
            for _ in range(2):  # each connection of the pool
                async with hot.hot.connection() as conn:
                    row = await (await conn.execute("SELECT count(*) FROM pg_prepared_statements")).fetchone()
                    count += row[0] if row else 0
            return count

        assert _run(store, calls) == 0
    finally:
        store.dispose()


def test_the_hot_pool_s_reads_run_without_jit(careless_url: str, group_id: str) -> None:
    # A narrow read sends no transaction settings; with PostgreSQL's JIT on (its default), a
    # page the statistics guess large compiled hundreds of functions per call (0.3-5 s: a
    # 16-partition DescribeGroup x43 on a big store). The session sets it off when it connects.
    store = Store.open(StoreConfig(careless_url, SessionSettings(), hot_pool_size=2))
    try:

        async def calls(hot: AsyncStore) -> set[str]:
            await hot.commit_offsets(group_id, [OffsetCommit("t", 0, 1)])
            await hot.fetch_offsets(group_id)
            seen = set()
            for _ in range(2):  # each connection of the pool
                async with hot.hot.connection() as conn:
                    row = await (await conn.execute("SHOW jit")).fetchone()
                    seen.add(row[0] if row else "")
            return seen

        assert _run(store, calls) == {"off"}
    finally:
        store.dispose()


@pytest.mark.parametrize("session", ["off", "local", "remote_apply"])
def test_the_sql_api_commits_synchronously_whatever_the_callers_session_says(
    database_url: str, group_id: str, session: str
) -> None:
    # The SQL API's callers bring their own sessions; the rule's function raises the setting
    # for the transaction (read at COMMIT) and keeps a stronger one.
    with psycopg.connect(conninfo(database_url)) as conn:
        conn.execute(f"SET synchronous_commit = {session}")
        generation = conn.execute("SELECT offsetstore.join_group(%s)", (group_id,)).fetchone()
        assert generation is not None
        conn.execute(
            "SELECT * FROM offsetstore.commit_offsets(%s, %s, ARRAY['t'], ARRAY[0], ARRAY[3])",
            (group_id, generation[0]),
        )
        seen = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
        conn.rollback()
    assert seen == ("remote_apply" if session == "remote_apply" else "on",)
