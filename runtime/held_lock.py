"""A session advisory lock held across rounds, on a connection of its own: one holder of a task per database.

The maintenance round takes its lock for one round; a task that keeps state between rounds
(the Kafka mirror's cursor) holds its lock as long as it runs, so that two servers of one
database never run it at once, and the other takes over when the holder stops or dies (its
session ends, and the lock with it). The connection comes from the store's colder pool and
is held; a failure on it closes it for good (never back to the pool still holding the lock).
"""

from __future__ import annotations

import contextlib
import logging

from sqlalchemy import func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from offsetstore.runtime.async_store import AsyncStore
from offsetstore.storage.advisory_locks import describe_holder

__all__ = ["HeldLock"]

log = logging.getLogger(__name__)


class HeldLock:
    """Advisory lock ``key`` of ``store``'s database, taken by :meth:`hold` and held until :meth:`release`."""

    def __init__(self, store: AsyncStore, key: int, what: str) -> None:
        self.store = store
        self.key = key
        self.what = what
        self._stack: contextlib.AsyncExitStack | None = None
        self._conn: AsyncConnection | None = None
        self._holder_said = False

    @property
    def held(self) -> bool:
        return self._conn is not None

    async def hold(self) -> bool:
        """True while the lock is ours: takes it if it is free, checks the session still lives if ours already.

        A database error (the connection lost) drops the lock and raises; the next call tries again.
        """
        if self._conn is not None:
            try:
                await self._conn.scalar(select(literal(1)))
                await self._conn.commit()
            except BaseException:
                await self._drop()
                raise
            return True
        stack = contextlib.AsyncExitStack()
        conn = await stack.enter_async_context(self.store.connection())
        try:
            got = bool(await conn.scalar(select(func.pg_try_advisory_lock(self.key))))
            holder = None if got else await conn.run_sync(describe_holder, self.key)
            await conn.commit()
        except BaseException:
            self._conn, self._stack = conn, stack
            await self._drop()
            raise
        if not got:
            await stack.aclose()
            if not self._holder_said:  # once: the other server's lock is the normal case, not a fault
                log.info("%s runs in another server (advisory lock %d held by %s)", self.what, self.key, holder)
                self._holder_said = True
            return False
        self._stack, self._conn = stack, conn
        self._holder_said = False
        log.info("%s runs here (advisory lock %d)", self.what, self.key)
        return True

    async def release(self) -> None:
        """Gives the lock up (another server may take it) and the connection back."""
        if self._conn is None or self._stack is None:
            return
        try:
            await self._conn.execute(select(func.pg_advisory_unlock(self.key)))
            await self._conn.commit()
        except Exception:
            await self._drop()
            return
        stack, self._stack, self._conn = self._stack, None, None
        await stack.aclose()

    async def _drop(self) -> None:
        """Closes the connection (its session, and the lock with it): it never goes back to the pool holding it."""
        conn, stack, self._conn, self._stack = self._conn, self._stack, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()
