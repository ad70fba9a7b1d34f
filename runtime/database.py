"""Where the store's operations run: the pools, the health probe, the retry rule and the timing.

:class:`Database` is the half of the runtime store that knows connections and failures, not
operations: the storage core's functions run on SQLAlchemy's asyncio engine through
``AsyncConnection.run_sync`` (a greenlet, not a thread); the hot path's steps run on psycopg's
``AsyncConnection`` from a pool with none of SQLAlchemy's layers (:mod:`._hot_async`).
Failures are classified as the Store classifies them, and the caller's deadline
(:func:`~offsetstore.runtime._calls.deadline`) bounds the work. The operations and the
batchers that serve them are :class:`~offsetstore.runtime.async_store.AsyncStore`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

import psycopg
import psycopg_pool
import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from offsetstore import storage
from offsetstore.core.errors import OffsetStoreError, StoreUnavailableError
from offsetstore.runtime._calls import ATTEMPTS, Bound, caller_bound, caller_gone, classify, retryable, timeout_ms
from offsetstore.runtime._connect import admit_async, create_async_engine
from offsetstore.runtime._hot_async import bounded_read, drive_steps_async, on_primary
from offsetstore.runtime._hot_pool import connection_lost, create_async_pool
from offsetstore.runtime._read_batch import Rows
from offsetstore.runtime.config import StoreConfig
from offsetstore.storage.engine import NotThePrimary

__all__ = ["DOWN_WAIT_SECONDS", "Database"]

R = TypeVar("R")

#: How long a call waits for a pooled connection while the health probe finds the database down.
DOWN_WAIT_SECONDS = 0.2


class Database:
    """The pools of ``config``'s database, its health, the retry rule and the timing of each operation.

    Made from plain data (:class:`~offsetstore.runtime.config.StoreConfig`) and opened in the
    event loop that will use it, as psycopg_pool's pools are. It holds ``config.hot_pool_size``
    connections for the batches and fetches (psycopg's pool), ``config.cold_pool`` for
    everything else (SQLAlchemy's asyncio engine), and one for the health probe. Its hooks
    (``config.observer``) are given here and stay.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        #: Connections the hot pool holds at most.
        self.pool_size: int = config.hot_pool_size
        self.statement_timeout_ms = config.statement_timeout_ms
        #: What the store reports as it runs (the metrics), from its config.
        self.observer = config.observer
        self.settings = config.session
        self.engine: AsyncEngine = create_async_engine(config.url, self.settings, pool_size=config.cold_pool)
        self.hot = create_async_pool(config.url, self.settings, size=self.pool_size)
        self._conninfo = cast(str, self.hot.conninfo)  # the pool was made with a string (create_async_pool)
        self._connect_timeout = self.settings.connect_timeout_s
        self._health: psycopg.AsyncConnection | None = None
        self._down = False  # the latest health probe found no database to serve from
        self._in_use = 0  # hot connections calls hold now (hot_connection)
        self._health_lock: asyncio.Lock | None = None

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
        """Closes every connection."""
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

    # --- health ---------------------------------------------------------------------------

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
