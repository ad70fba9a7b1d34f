"""The store: one transaction per operation, database faults made typed, group commit; on asyncio.

:class:`AsyncStore` is the one runtime store. The server awaits it; callers in threads (the
maintenance, the metrics' scrapes, tests, tools) reach it through its sync face,
:class:`~offsetstore.runtime.store.Store`, which runs these very coroutines on the store's
event loop. It runs the storage core (functions taking a SQLAlchemy ``Connection``) on
SQLAlchemy's asyncio engine through ``AsyncConnection.run_sync``: a greenlet, not a thread.
The hot path (the group commit's batch, FetchOffsets, DescribeGroup, watermark reports) is
the storage core's steps driven on psycopg's ``AsyncConnection`` with none of SQLAlchemy's
layers (:mod:`._hot_async`). Failures are classified as the Store classifies them, and the
caller's deadline (:func:`~offsetstore.runtime._calls.deadline`) bounds the work.

Group commit (:class:`AsyncWriteBatcher`) and coalesced reads (:mod:`._read_batch`) are a
few asyncio tasks each: a task takes whatever is queued when it is free, so the next batch
gathers while one is in the database (no timer).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar, cast

import psycopg
import psycopg_pool
import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from offsetstore import storage
from offsetstore.core.errors import OffsetStoreError, StoreUnavailableError
from offsetstore.core.types import (
    CommittedOffset,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    Page,
    ResetRequest,
    ResetResult,
    TopicPartition,
    Watermark,
)
from offsetstore.runtime._calls import ATTEMPTS, Bound, caller_bound, caller_gone, classify, retryable, timeout_ms
from offsetstore.runtime._connect import admit_async, create_async_engine
from offsetstore.runtime._hot_async import bounded_read, drive_steps_async, on_primary
from offsetstore.runtime._hot_pool import connection_lost, create_async_pool
from offsetstore.runtime._read_batch import FETCH, ReadBatcher, Rows, describe_kinds
from offsetstore.runtime._write_batcher import AsyncWriteBatcher
from offsetstore.runtime.config import Carry, StoreConfig, StoreObserver
from offsetstore.storage.engine import NotThePrimary
from offsetstore.storage.retention import expiry

__all__ = ["AsyncStore", "AsyncWriteBatcher", "Carry", "StoreConfig", "StoreObserver"]

R = TypeVar("R")

#: How long a call waits for a pooled connection while the health probe finds the database down.
DOWN_WAIT_SECONDS = 0.2


class AsyncStore:
    """Runs each storage operation in its own transaction on ``config``'s database, classifying failures.

    Made from plain data (:class:`~offsetstore.runtime.config.StoreConfig`) and opened in the
    event loop that will use it, as psycopg_pool's pools are: ``async with AsyncStore(config)
    as store:``, or :meth:`open` and :meth:`close`. It holds ``config.hot_pool_size``
    connections for the batches and fetches (psycopg's pool), ``config.cold_pool`` for
    everything else (SQLAlchemy's asyncio engine), and one for the health probe.
    ``write_flushers`` tasks write the batches of commits and joins (:class:`AsyncWriteBatcher`),
    each holding one hot connection while it writes; ``read_flushers`` tasks coalesce concurrent
    fetches and descriptions (:mod:`._read_batch`).
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        #: Connections the hot pool holds at most.
        self.pool_size: int = config.hot_pool_size
        self.statement_timeout_ms = config.statement_timeout_ms
        #: The most one FetchOffsets or DescribeGroup answer may hold; larger ones come in pages.
        self.max_response_bytes = config.max_response_bytes
        self.observer = config.observer
        self.settings = config.session
        self.engine: AsyncEngine = create_async_engine(config.url, self.settings, pool_size=config.cold_pool)
        self.hot = create_async_pool(config.url, self.settings, size=self.pool_size)
        self._conninfo = cast(str, self.hot.conninfo)  # the pool was made with a string (create_async_pool)
        self._connect_timeout = self.settings.connect_timeout_s
        self._health: psycopg.AsyncConnection | None = None
        self._down = False  # the latest health probe found no database to serve from
        self._key: bytes | None = None  # the page-token key, read at first use
        self._in_use = 0  # hot connections calls hold now (hot_connection)
        self._health_lock: asyncio.Lock | None = None
        self.status_rules = config.status_rules
        self.write_flushers = config.write_flushers
        self.writes = AsyncWriteBatcher(
            self,
            flushers=config.write_flushers,
            carry=config.carry,
            observe=lambda calls: self._batched("write", calls),
        )
        kinds = (FETCH, *describe_kinds(config.status_rules.window))  # the first statements concurrent reads share
        statement_ms = self.settings.statement_timeout_ms
        self.reads = ReadBatcher(
            self._read_rows,
            self.timeout_ms,
            statement_ms,
            kinds=kinds,
            flushers=config.read_flushers,
            observe=lambda calls: self._batched("read", calls),
        )

    async def __aenter__(self) -> AsyncStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def observe_with(
        self,
        *,
        operation: Callable[[str, float], None] | None = None,
        expired: Callable[[int], None] | None = None,
        batch: Callable[[str, int], None] | None = None,
    ) -> None:
        """Replaces the hooks given, the others stay: how a metrics registry built over a store already open attaches.

        A second registry built over the same store takes the hooks it gives over.
        """
        self.observer = StoreObserver(
            operation or self.observer.operation, expired or self.observer.expired, batch or self.observer.batch
        )

    def _batched(self, kind: str, calls: int) -> None:
        hook = self.observer.batch
        if hook is not None:
            hook(kind, calls)

    def pool_in_use(self) -> int:
        """Hot connections checked out now (the metrics' gauge; safe to read from any thread).

        Counted where calls take them: the pool's own ``pool_size - pool_available`` also counts
        connections still being opened (the first one right after :meth:`open`, every retry while
        the database is down), which no call holds.
        """
        return self._in_use

    def timeout_ms(self, bound: Bound | None) -> int | None:
        """The statement timeout ``bound``'s deadline asks for; None where the store's own is shorter.

        Raises :class:`StoreUnavailableError` when the deadline has passed already.
        """
        return timeout_ms(bound, self.statement_timeout_ms)

    async def open(self) -> None:
        """Opens the pools; in the event loop that will use them."""
        self._health_lock = asyncio.Lock()
        await self.hot.open(wait=False)

    async def warm(self) -> None:
        """Opens the colder pool's first connection now, which runs SQLAlchemy's first-connect queries.

        A server calls it before it serves: else those queries (the server's version, its
        settings) run inside the first call that needs that pool, and are in that call's trace.
        A database out of reach now is no reason not to start: the first call connects, as before.
        """
        with contextlib.suppress(sqlalchemy.exc.DBAPIError):
            async with self.engine.connect():
                pass

    async def close(self) -> None:
        """Writes what is queued, then closes every connection."""
        await self.writes.stop()
        await self.reads.stop()
        if self._health is not None:
            await self._health.close()
            self._health = None
        await self.hot.close()
        await self.engine.dispose()

    # --- running operations -------------------------------------------------------------

    async def _timed(self, name: str, call: Awaitable[R]) -> R:
        started = time.perf_counter()
        try:
            return await call
        finally:
            observe = self.observer.operation
            if observe is not None:
                observe(name, time.perf_counter() - started)

    async def attempts(
        self, name: str, body: Callable[[], Awaitable[R]], *, unapplied: Callable[[], bool] | None = None
    ) -> R:
        """``body()``, again where PostgreSQL aborted it for a conflict; database faults made typed.

        Where ``unapplied()`` says a failed ``body()`` cannot have changed anything (a read,
        a write that never sent COMMIT), a connection that died under it (killed while idle
        in the pool, after its check) earns one more attempt, on a fresh connection.
        """
        lost_once = False
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await body()
            except OffsetStoreError:
                raise
            except Exception as error:
                if attempt < ATTEMPTS and retryable(error):
                    continue
                if not lost_once and unapplied is not None and unapplied() and connection_lost(error):
                    lost_once = True
                    continue
                typed = classify(name, error)
                if typed is None:
                    raise
                raise typed from error
        raise AssertionError("unreachable")

    async def run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs ``operation(conn, *args, **kwargs)`` of the storage core in a transaction of its own."""

        async def transaction() -> R:
            ms = self.timeout_ms(caller_bound())
            async with self.engine.begin() as conn:
                if ms is not None:  # the caller's deadline is nearer than the statement timeout
                    await conn.exec_driver_sql(self.settings.sql(ms))
                result = await conn.run_sync(operation, *args, **kwargs)
                if caller_gone():
                    raise StoreUnavailableError("the caller went away before the transaction committed")
                return result

        name = operation.__name__
        return await self._timed(name, self.attempts(name, transaction))

    async def read(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs a read of the storage core (in a transaction: the settings that bound it are the transaction's)."""
        return await self.run(operation, *args, **kwargs)

    async def run_hot(self, name: str, steps: Callable[[], storage.HotSteps[R]], *, read_only: bool = False) -> R:
        """Runs the hot-path ``steps`` on a pooled psycopg connection, its settings in the same round trip."""
        return await self._timed(name, self._hot(name, steps, read_only=read_only))

    async def _hot(self, name: str, steps: Callable[[], storage.HotSteps[R]], *, read_only: bool = False) -> R:
        async def once() -> R:
            ms = self.timeout_ms(caller_bound())
            async with self.hot_connection(ms) as conn:
                return await drive_steps_async(conn, steps(), self.settings, ms, read_only=read_only)

        return await self.attempts(name, once, unapplied=(lambda: True) if read_only else None)

    async def _read_rows(self, name: str, sql: str, params: Mapping[str, object], ms: int | None) -> Rows:
        """The rows of a coalesced read's statement (:mod:`._read_batch`), bounded by ``ms`` as a read alone is."""

        async def once() -> Rows:
            async with self.hot_connection(ms) as conn:
                return await bounded_read(conn, sql, params, self.settings, ms)

        return await self.attempts(name, once, unapplied=lambda: True)

    async def _read(self, name: str, make: Callable[[], storage.HotSteps[R]]) -> R:
        """The read ``make()`` of the hot path; its first statement rides a batch where it may (:mod:`._read_batch`)."""
        return await self._timed(name, self.reads.run(make, lambda once: self._hot(name, once, read_only=True)))

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        """A connection of the colder pool held across transactions (the maintenance's advisory lock); each begins with the settings."""
        async with self.engine.connect() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def hot_connection(self, timeout_ms: int | None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of the hot pool, waited for no longer than ``timeout_ms`` (the caller's deadline) allows.

        While the health probe finds the database down, the wait is short: calls answer
        UNAVAILABLE at once instead of waiting out their deadline, and the first one after
        the pool has reconnected goes through. A connection found on a standby is closed
        (the pool replaces it) when its statement fails for it.
        """
        wait = float(self._connect_timeout) if timeout_ms is None else min(self._connect_timeout, timeout_ms / 1000)
        if self._down:
            wait = min(wait, DOWN_WAIT_SECONDS)
        try:
            async with self.hot.connection(timeout=wait) as conn, on_primary(conn):
                self._in_use += 1
                try:
                    yield conn
                finally:
                    self._in_use -= 1
        except psycopg_pool.PoolTimeout:
            if self._down:
                raise StoreUnavailableError("the offset store's database is unavailable") from None
            raise

    async def token_key(self) -> bytes:
        """The store's page-token key (read once)."""
        if self._key is None:
            self._key = await self.read(storage.token_key)
        return self._key

    async def ping(self) -> bool:
        """True when the database answers as a primary the server may serve from, on a connection of its own.

        Not one of the pools': a busy server whose pool is all in use is still healthy. A
        server that answers but is a standby (a failover demoted it), or lacks the synchronous
        replication required, is not healthy: then every pooled connection is dropped, so the
        pools connect anew and libpq (``target_session_attrs=read-write``) finds the primary.
        """
        assert self._health_lock is not None, "open() first"
        async with self._health_lock:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    if self._health is None or self._health.closed:
                        self._health = await psycopg.AsyncConnection.connect(
                            self._conninfo, autocommit=True, prepare_threshold=None
                        )
                    await admit_async(self._health, self.settings)
                self._down = False
                return True
            except (psycopg.Error, OSError, TimeoutError) as error:
                self._down = True
                if self._health is not None:
                    await self._health.close()
                    self._health = None
                if isinstance(error, NotThePrimary):
                    await self.renew_connections()
                return False

    async def renew_connections(self) -> None:
        """Drops every pooled connection (they may be on a server that is no longer the primary)."""
        with contextlib.suppress(Exception):
            await self.hot.drain()
        with contextlib.suppress(Exception):
            await self.engine.dispose()

    # --- the operations -----------------------------------------------------------------

    async def commit_offsets(
        self, group_id: str, commits: Sequence[OffsetCommit], *, generation: int = 0, actor: str = ""
    ) -> list[CommittedOffset]:
        if not commits:  # nothing to write: only the generation is checked
            return await self.read(storage.commit_offsets, group_id, commits, generation=generation, actor=actor)
        outcome = await self._timed(
            "commit_offsets", self._write(storage.CommitRequest(group_id, commits, generation, actor))
        )
        assert isinstance(outcome, list)
        return outcome

    async def join_group(self, group_id: str, member_id: str = "", member_host: str = "") -> int:
        outcome = await self._timed("join_group", self._write(storage.JoinRequest(group_id, member_id, member_host)))
        assert isinstance(outcome, int)
        return outcome

    async def _write(self, request: storage.WriteRequest) -> storage.WriteOutcome:
        storage.check_write(request)
        return await self.writes.submit(request)

    async def fetch_offsets(
        self, group_id: str, topics: storage.SelectionArg = None, *, page_size: int = 0, page_token: str = ""
    ) -> FetchResult:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, await self.token_key())
        return await self._read("fetch_offsets", partial(storage.fetch_offsets_steps, group_id, topics, page))

    async def describe_group(
        self, group_id: str, *, page_size: int = 0, page_token: str = "", lag_history: bool = False
    ) -> GroupDescription:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, await self.token_key())
        make = partial(storage.describe_group_steps, group_id, page, self.status_rules, lag_history)
        return await self._read("describe_group", make)

    async def reset_offsets(self, request: ResetRequest, *, actor: str = "") -> ResetResult:
        return await self.run(storage.reset_offsets, request, actor=actor)

    async def delete_offsets(
        self, group_id: str, topics: storage.SelectionArg = None, *, all_topics: bool = False, actor: str = ""
    ) -> list[TopicPartition]:
        return await self.run(storage.delete_offsets, group_id, topics, all_topics=all_topics, actor=actor)

    async def list_groups(self, prefix: str = "", *, page_size: int = 0, page_token: str = "") -> Page[GroupSummary]:
        return await self.run(storage.list_groups, prefix, page_size=page_size, page_token=page_token)

    async def list_offset_history(
        self,
        group_id: str,
        topics: storage.SelectionArg = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[OffsetChange]:
        return await self.run(
            storage.list_offset_history,
            group_id,
            topics,
            since=since,
            until=until,
            page_size=page_size,
            page_token=page_token,
        )

    async def observe_offsets(
        self, group_id: str, positions: Sequence[OffsetCommit], *, source: str, actor: str = ""
    ) -> int:
        return await self.run(storage.observe_offsets, group_id, positions, source=source, actor=actor)

    async def report_watermarks(self, watermarks: Sequence[Watermark]) -> None:
        await self.run_hot("report_watermarks", lambda: storage.report_watermarks_steps(watermarks))

    async def expire_groups(
        self, idle_for: timedelta, *, prefix: str = "", limit: int = 0, execute: bool = False, actor: str = ""
    ) -> list[ExpiredGroup]:
        """Groups idle for ``idle_for``; with ``execute``, expires them, each in a transaction of its own.

        Returns the groups that expired (or would): one that became active meanwhile is left out.
        """
        candidates = await self.run(expiry.idle_groups, idle_for, prefix=prefix, limit=limit)
        if not execute:
            return candidates
        expired = []
        for candidate in candidates:
            found = await self.run(expiry.expire_group, candidate.group_id, idle_for, actor=actor)
            if found is not None:
                expired.append(found)
        hook = self.observer.expired
        if expired and hook is not None:
            hook(len(expired))
        return expired
