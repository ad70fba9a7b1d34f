"""The asyncio server's handle on the database: the Store's operations, awaited, without a thread.

:class:`AsyncStore` runs the very storage core :class:`~offsetstore.storage.store.Store`
runs (functions taking a SQLAlchemy ``Connection``), on SQLAlchemy's asyncio engine through
``AsyncConnection.run_sync``: a greenlet, not a thread. The two hot statements (the group
commit's batch and the fetch) are the storage core's steps (:func:`storage.write_batch_steps`,
:func:`storage.fetch_offsets_steps`) driven on psycopg's ``AsyncConnection``, prepared, with
none of SQLAlchemy's layers. Failures are classified as the Store classifies them, and the
caller's deadline (:func:`~offsetstore.storage.store.deadline`) bounds the work the same way.

Group commit (:class:`AsyncWriteBatcher`) is a few asyncio tasks: each takes whatever is
queued when it is free, so the next batch gathers while one is in the database (no timer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

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
    ResetResult,
    TopicPartition,
    Watermark,
)
from offsetstore.storage import retention
from offsetstore.storage.engine import create_async_engine, create_async_pool, session_args
from offsetstore.storage.store import ATTEMPTS, Store, caller_bound, classify, one_requests_fault, retryable

__all__ = ["AsyncStore", "AsyncWriteBatcher"]

log = logging.getLogger(__name__)

R = TypeVar("R")

#: Up to this much goes into one batch; a larger request is a batch of its own.
MAX_BATCH_REQUESTS = 512
MAX_BATCH_OFFSETS = 10_000
#: Rows converted between two turns of the event loop.
FETCH_SLICE = 200


async def run_hot(conn: psycopg.AsyncConnection, steps: storage.HotSteps[R]) -> R:
    """Drives the storage core's ``steps`` on a psycopg ``AsyncConnection``, each statement prepared."""
    try:
        statement = next(steps)
        while True:
            if statement is storage.PAUSE:
                await asyncio.sleep(0)  # other calls run between slices of a wide request
                statement = steps.send(None)
                continue
            sql, params = statement
            cursor = await conn.execute(sql, params, prepare=True)
            rows: list[tuple] = []
            if cursor.description is None:
                pass
            elif cursor.rowcount <= FETCH_SLICE:
                rows = await cursor.fetchall()
            else:  # converted a slice at a time: a 10,000-row answer would hold the loop for milliseconds
                while batch := await cursor.fetchmany(FETCH_SLICE):
                    rows.extend(batch)
                    await asyncio.sleep(0)
            statement = steps.send(rows)
    except StopIteration as done:
        return done.value


class AsyncStore:
    """The operations of ``store`` (a :class:`Store` on the same database), awaitable.

    It opens its own connections: ``hot_pool_size`` for the batches and fetches (psycopg's
    pool), ``pool_size`` for everything else (SQLAlchemy's asyncio engine), and one for the
    health probe. ``store`` lends its settings (statement timeout, response size) and its
    hooks (``observe``, ``expired``: the metrics), read at each call.
    """

    def __init__(
        self,
        store: Store,
        *,
        hot_pool_size: int = 8,
        pool_size: int = 4,
        write_flushers: int = 2,
    ) -> None:
        self.store = store
        url = store.engine.url.render_as_string(hide_password=False)
        args = session_args(store.engine)  # the very session settings of the store's engine
        self.engine: AsyncEngine = create_async_engine(url, args, pool_size=pool_size)
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self.hot = create_async_pool(url, args, size=hot_pool_size)
        self._conninfo = self.hot.conninfo
        self._connect_timeout = args.get("connect_timeout", 5)
        self._health: psycopg.AsyncConnection | None = None
        self._key: bytes | None = None  # the page-token key, read at first use
        self._health_lock: asyncio.Lock | None = None
        self.writes = AsyncWriteBatcher(self, flushers=write_flushers)

    async def open(self) -> None:
        """Opens the pools; in the event loop that will use them."""
        self._health_lock = asyncio.Lock()
        await self.hot.open(wait=False)

    async def close(self) -> None:
        """Writes what is queued, then closes every connection."""
        await self.writes.stop()
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
            observe = self.store.observe
            if observe is not None:
                observe(name, time.perf_counter() - started)

    async def _attempts(self, name: str, body: Callable[[], Awaitable[R]]) -> R:
        """``body()``, again where PostgreSQL aborted it for a conflict; database faults made typed."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await body()
            except OffsetStoreError:
                raise
            except Exception as error:
                if attempt < ATTEMPTS and retryable(error):
                    continue
                typed = classify(name, error)
                if typed is None:
                    raise
                raise typed from error
        raise AssertionError("unreachable")

    def _timeout_ms(self) -> int | None:
        return self.store._timeout_ms(caller_bound())

    async def run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs ``operation(conn, *args, **kwargs)`` of the storage core in a transaction of its own."""

        async def transaction() -> R:
            ms = self._timeout_ms()
            async with self.engine.begin() as conn:
                if ms is not None:
                    await conn.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")
                result = await conn.run_sync(operation, *args, **kwargs)
                if self.store._caller_gone():
                    raise StoreUnavailableError("the caller went away before the transaction committed")
                return result

        name = operation.__name__
        return await self._timed(name, self._attempts(name, transaction))

    async def read(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs a read of ONE statement on an autocommit connection (as :meth:`run` under a short deadline)."""
        if self._timeout_ms() is not None:
            return await self.run(operation, *args, **kwargs)

        async def once() -> R:
            async with self._autocommit.connect() as conn:
                return await conn.run_sync(operation, *args, **kwargs)

        name = operation.__name__
        return await self._timed(name, self._attempts(name, once))

    async def run_hot(self, name: str, steps: Callable[[], storage.HotSteps[R]]) -> R:
        """Runs the hot-path ``steps`` on a pooled psycopg connection (in a transaction under a short deadline)."""

        async def once() -> R:
            ms = self._timeout_ms()
            async with self.hot.connection() as conn:
                if ms is None:
                    return await run_hot(conn, steps())
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL statement_timeout = {ms}")
                    return await run_hot(conn, steps())

        return await self._timed(name, self._attempts(name, once))

    async def _token_key(self) -> bytes:
        if self._key is None:
            self._key = await self.read(storage.token_key)
        return self._key

    async def ping(self) -> bool:
        """True when the database answers a trivial query, on a connection of its own (not the pools')."""
        assert self._health_lock is not None, "open() first"
        async with self._health_lock:
            try:
                async with asyncio.timeout(self._connect_timeout):
                    if self._health is None or self._health.closed:
                        self._health = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                    await (await self._health.execute("SELECT 1")).fetchone()
                return True
            except (psycopg.Error, OSError, TimeoutError):
                if self._health is not None:
                    await self._health.close()
                    self._health = None
                return False

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
        page = storage.PageRequest(page_size, page_token, self.store.max_response_bytes, await self._token_key())
        steps = storage.fetch_offsets_steps(group_id, topics, page)  # bad input raises here, before a connection
        first = [steps]

        def once() -> storage.HotSteps[FetchResult]:
            # A retried attempt starts the steps afresh.
            return first.pop() if first else storage.fetch_offsets_steps(group_id, topics, page)

        return await self.run_hot("fetch_offsets", once)

    async def describe_group(self, group_id: str, *, page_size: int = 0, page_token: str = "") -> GroupDescription:
        page = storage.PageRequest(page_size, page_token, self.store.max_response_bytes, await self._token_key())
        return await self.read(storage.describe_group, group_id, page)

    async def reset_offsets(self, group_id: str, topics: storage.SelectionArg = None, **target: Any) -> ResetResult:
        """See :meth:`Store.reset_offsets` for the keywords (``all_topics``, a target, ``dry_run``, ``actor``)."""
        return await self.run(storage.reset_offsets, group_id, topics, **target)

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

    async def report_watermarks(self, watermarks: Sequence[Watermark]) -> None:
        await self.run_hot("report_watermarks", lambda: storage.report_watermarks_steps(watermarks))

    async def expire_groups(
        self, idle_for: timedelta, *, prefix: str = "", limit: int = 0, execute: bool = False, actor: str = ""
    ) -> list[ExpiredGroup]:
        """See :meth:`Store.expire_groups`."""
        candidates = await self.run(retention.idle_groups, idle_for, prefix=prefix, limit=limit)
        if not execute:
            return candidates
        expired = []
        for candidate in candidates:
            found = await self.run(retention.expire_group, candidate.group_id, idle_for, actor=actor)
            if found is not None:
                expired.append(found)
        if expired and self.store.expired is not None:
            self.store.expired(len(expired))
        return expired


class _Write:
    """A caller's request waiting for its batch; the caller awaits ``future``."""

    __slots__ = ("request", "bound", "future")

    def __init__(self, request: storage.WriteRequest, bound: tuple[float, Callable[[], bool]] | None) -> None:
        self.request = request
        self.bound = bound
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def gone(self) -> bool:
        """The caller left: its call was cancelled, or its context says it is no longer active."""
        return self.future.cancelled() or (self.bound is not None and not self.bound[1]())

    def finish(self, outcome: object) -> None:
        if not self.future.done():
            self.future.set_result(outcome)


class _CallersLeft(Exception):
    """Some callers left before the batch committed: roll back, redo without them."""

    def __init__(self, gone: list[_Write]) -> None:
        self.gone = gone


# The batch failed for a reason that may be one request's: each request then runs alone.
_ALONE = object()


class AsyncWriteBatcher:
    """Group commit on asyncio: concurrent commits and joins share one transaction, statement and WAL flush.

    The same rules as the sync :class:`~offsetstore.storage.store.WriteBatcher`: each of
    ``flushers`` tasks takes everything queued whenever it is free (no timer); each request
    keeps its own outcome; the batch's statement timeout is its most pressed caller's; a
    caller that left before COMMIT (its call cancelled, or its deadline passed) is taken
    out and the rest redone, so a caller that went away never has its request committed;
    a reply is sent only after COMMIT returned; a batch that timed out or failed in a
    statement runs each request alone, so one locked group cannot fail the others.
    """

    def __init__(self, store: AsyncStore, *, flushers: int = 2) -> None:
        if flushers < 1:
            raise ValueError("write_flushers must be >= 1")
        self.store = store
        self.flushers = flushers
        self._queue: deque[_Write] = deque()
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    def queued(self) -> int:
        """Requests waiting for a flusher."""
        return len(self._queue)

    async def submit(self, request: storage.WriteRequest) -> storage.WriteOutcome:
        """Waits for ``request``'s batch; returns its outcome or raises its error."""
        bound = caller_bound()
        self.store.store._timeout_ms(bound)  # a deadline already past never reaches the database
        if self._stopped:
            raise StoreUnavailableError("the offset store is shutting down")
        if self._wake is None:
            self._wake = asyncio.Event()
            self._tasks = [
                asyncio.create_task(self._loop(), name=f"offsetstore-writes-{n}") for n in range(self.flushers)
            ]
        write = _Write(request, bound)
        self._queue.append(write)
        self._wake.set()
        outcome = await write.future  # a cancelled call cancels its future: the flusher sees it gone
        if outcome is _ALONE:
            outcome = (await self._alone([write]))[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    async def stop(self) -> None:
        """Writes what is queued, then ends the flushers."""
        self._stopped = True
        if self._wake is not None:
            self._wake.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            while not self._queue:
                if self._stopped:
                    self._wake.set()  # the other flushers end too
                    return
                self._wake.clear()
                await self._wake.wait()
            batch = [self._queue.popleft()]
            size = len(getattr(batch[0].request, "commits", ()))
            while self._queue and len(batch) < MAX_BATCH_REQUESTS:
                size += len(getattr(self._queue[0].request, "commits", ()))
                if size > MAX_BATCH_OFFSETS:
                    break
                batch.append(self._queue.popleft())
            if self._queue:
                self._wake.set()  # more than one batch's worth: another flusher may take it
            try:
                await self._flush(batch)
            except Exception as error:  # no caller may wait forever
                log.exception("write batch crashed")
                for write in batch:
                    write.finish(error)

    async def _flush(self, batch: list[_Write]) -> None:
        live = []
        for write in batch:
            if write.gone():
                write.finish(StoreUnavailableError("the caller went away before the transaction committed"))
            elif write.bound is not None and write.bound[0] <= time.monotonic():
                write.finish(StoreUnavailableError("the caller's deadline passed before the database answered"))
            else:
                live.append(write)
        while live:
            try:
                outcomes = await self._alone(live)
            except _CallersLeft as left:
                for write in left.gone:
                    write.finish(StoreUnavailableError("the caller went away before the transaction committed"))
                live = [write for write in live if write not in left.gone]
                continue
            except OffsetStoreError as error:
                alone = len(live) > 1 and one_requests_fault(error)
                for write in live:
                    write.finish(_ALONE if alone else error)
                return
            except Exception as error:
                if len(live) == 1:
                    raise
                log.warning("write batch failed; its requests run alone", extra={"error": type(error).__name__})
                for write in live:
                    write.finish(_ALONE)
                return
            for write, outcome in zip(live, outcomes, strict=True):
                write.finish(outcome)
            return

    async def _alone(self, live: list[_Write]) -> list[storage.WriteOutcome]:
        """Writes ``live`` in one transaction (retried on conflicts); a caller gone before COMMIT rolls it back."""
        timeouts = []
        for write in live:
            try:
                timeouts.append(self.store.store._timeout_ms(write.bound))
            except StoreUnavailableError:
                timeouts.append(1)  # its deadline is past: it ends the batch at once, then runs alone
        ms = min((t for t in timeouts if t is not None), default=None)
        requests = [write.request for write in live]

        async def transaction() -> list[storage.WriteOutcome]:
            async with self.store.hot.connection() as conn, conn.transaction():
                if ms is not None:
                    await conn.execute(f"SET LOCAL statement_timeout = {ms}")
                outcomes = await run_hot(conn, storage.write_batch_steps(requests))
                gone = [write for write in live if write.gone()]
                if gone:
                    raise _CallersLeft(gone)  # rolled back
                return outcomes

        return await self.store._attempts("write_batch", transaction)
