"""Group commit on asyncio: concurrent commits and joins written in one transaction (rules: :mod:`._group_commit`).

:class:`AsyncWriteBatcher` is a few asyncio tasks of the store (:class:`~offsetstore.runtime.async_store.AsyncStore`):
each takes whatever is queued when it is free, so the next batch gathers while one is in the
database (no timer; the queue and the tasks: :mod:`._flushers`). It needs of the store only what :class:`Runtime` names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

import psycopg

from offsetstore import storage
from offsetstore.runtime import _group_commit as gc
from offsetstore.runtime._calls import Bound, caller_bound, caller_principal
from offsetstore.runtime._flushers import Flushers
from offsetstore.runtime._hot_async import write_transaction
from offsetstore.runtime.config import Carry
from offsetstore.storage.engine import SessionSettings

__all__ = ["AsyncWriteBatcher", "Carry", "Runtime"]

R = TypeVar("R")


class Runtime(Protocol):
    """What the batcher uses of its store: the deadline's timeout, a hot connection, the settings, the retry rule."""

    settings: SessionSettings

    def timeout_ms(self, bound: Bound | None) -> int | None: ...

    def hot_connection(self, timeout_ms: int | None) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...

    async def attempts(
        self, name: str, body: Callable[[], Awaitable[R]], *, unapplied: Callable[[], bool] | None = None
    ) -> R: ...


class _Write(gc.Waiting):
    """A caller's request waiting for its batch; the caller awaits ``future``."""

    __slots__ = ("carried", "future")

    def __init__(
        self, request: storage.WriteRequest, bound: Bound | None, carried: object = None, principal: str = ""
    ) -> None:
        super().__init__(request, bound, principal)
        self.future: asyncio.Future[gc.Handed] = asyncio.get_running_loop().create_future()
        self.carried = carried

    def gone(self) -> bool:
        """The caller left: its call was cancelled, or its context says it is no longer active."""
        return self.future.cancelled() or super().gone()

    def finish(self, outcome: gc.Handed) -> None:
        if not self.future.done():
            self.future.set_result(outcome)


class AsyncWriteBatcher:
    """Group commit on asyncio: ``flushers`` tasks take batches off one queue (rules: :mod:`._group_commit`).

    A caller whose call is cancelled counts as gone, as one whose deadline passed. Each
    request is its caller's principal's (:func:`~offsetstore.runtime._calls.caller_principal`),
    which the queue's shares are of (:class:`~offsetstore.runtime._group_commit.FairQueue`).
    """

    def __init__(
        self,
        store: Runtime,
        *,
        flushers: int = 2,
        carry: Carry | None = None,
        observe: Callable[[int], None] | None = None,
    ) -> None:
        if flushers < 1:
            raise ValueError("write_flushers must be >= 1")
        self.store = store
        self.carry = carry
        self._flushers: Flushers[_Write] = Flushers(
            "offsetstore-writes", flushers, gc.FairQueue(flushers), self._flush, observe
        )

    @property
    def flushers(self) -> int:
        """How many batches may be in the database at once."""
        return self._flushers.count

    def queued(self) -> int:
        """How many requests wait for a flusher (not yet in a batch)."""
        return len(self._flushers)

    async def submit(self, request: storage.WriteRequest) -> storage.WriteOutcome:
        """Waits for ``request``'s batch; returns its outcome or raises its error."""
        bound = caller_bound()
        self.store.timeout_ms(bound)  # a deadline already past never reaches the database
        write = _Write(request, bound, None if self.carry is None else self.carry.capture(), caller_principal())
        self._flushers.put(write)
        outcome = await write.future  # a cancelled call cancels its future: the flusher sees it gone
        if outcome is gc.ALONE:
            # Run again in this task, by a batch's rules: a caller gone before COMMIT hears GONE.
            alone = _Write(request, bound)
            await self._write_through(gc.Flush(gc.waiting([alone]), self.store.timeout_ms))
            outcome = alone.future.result()
        return gc.outcome(outcome)

    async def stop(self) -> None:
        """Writes what is queued, then ends the flushers."""
        await self._flushers.stop()

    async def _flush(self, batch: list[_Write]) -> None:
        try:
            flush = gc.Flush(gc.waiting(batch), self.store.timeout_ms, gc.BATCH_LOCK_TIMEOUT_MS)
            await self._write_through(flush, self.carry)
        except Exception as error:  # no caller may wait forever
            gc.crashed(batch, error)

    async def _write_through(self, flush: gc.Flush[_Write], carry: Carry | None = None) -> None:
        """Writes ``flush`` until each of its callers was handed something, redone without those who left."""
        while flush.live:
            try:
                if carry is None:
                    outcomes = await self._transaction(flush)
                else:
                    with carry.enter([w.carried for w in flush.live]):
                        outcomes = await self._transaction(flush)
            except Exception as error:
                flush.failed(error)  # raises an unknown error of a caller alone
            else:
                flush.succeeded(outcomes)

    async def _transaction(self, flush: gc.Flush[_Write]) -> list[storage.WriteOutcome]:
        """Writes ``flush``'s requests in one transaction (retried on conflicts); a caller gone rolls it back."""
        ms = flush.timeout_ms()
        requests = flush.requests()
        committing = False

        async def transaction() -> list[storage.WriteOutcome]:
            nonlocal committing
            committing = False

            def before_commit() -> None:
                nonlocal committing
                flush.check_callers()  # raises: rolled back
                committing = True  # from here a lost connection leaves the outcome unknown

            # BEGIN with the settings, the batch, COMMIT: three round trips of one send each
            # (write_transaction says why not pipelined). synchronous_commit, among the
            # settings, is read at COMMIT.
            async with self.store.hot_connection(ms) as conn:
                return await write_transaction(
                    conn,
                    storage.write_batch_steps(requests),
                    self.store.settings,
                    ms,
                    # A flusher never waits long on one group's lock: a group held in a long
                    # transaction (a Spark sink's, a SQL API caller's) fails the batch at once,
                    # and each request runs alone in its caller's task, with the whole lock timeout.
                    lock_timeout_ms=flush.lock_timeout_ms,
                    before_commit=before_commit,
                )

        return await self.store.attempts("write_batch", transaction, unapplied=lambda: not committing)
