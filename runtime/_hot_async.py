"""The hot path's statements on psycopg's asyncio connection: settings with each write, reads bounded by cancellation.

:class:`~offsetstore.runtime.async_store.AsyncStore` drives the storage core's steps
(:func:`storage.write_batch_steps`, :func:`storage.fetch_offsets_steps`) here, without
SQLAlchemy's layers; what each statement carries and why is :func:`drive_steps_async`'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import psycopg

from offsetstore import storage
from offsetstore.core.errors import StoreUnavailableError
from offsetstore.storage.engine import SessionSettings
from offsetstore.storage.steps import is_wide

__all__ = ["FETCH_SLICE", "bounded_read", "on_primary", "drive_steps_async", "write_transaction"]

R = TypeVar("R")

log = logging.getLogger(__name__)

#: Rows converted between two turns of the event loop.
FETCH_SLICE = 200


async def drive_steps_async(
    conn: psycopg.AsyncConnection,
    steps: storage.HotSteps[R],
    settings: SessionSettings,
    timeout_ms: int | None = None,
    *,
    lock_timeout_ms: int | None = None,
    read_only: bool = False,
) -> R:
    """Drives the storage core's ``steps`` on a psycopg ``AsyncConnection``.

    A statement goes with the transaction's settings (:meth:`SessionSettings.sql`, the
    caller's ``timeout_ms`` if nearer) in one round trip, pipelined: on an autocommit
    connection the two share one implicit transaction (no Sync between them), inside
    ``conn.transaction()`` they are part of it. A narrow statement of ``read_only`` steps
    needs none of them (no COMMIT to make durable, no lock to wait for but DDL's): it is
    bounded here instead, by cancelling it when its time is up, which holds through any
    pooler as well and costs no statement. Statements are prepared where
    ``settings.prepare`` allows, unless wide (then planned for their arrays).
    """

    async def run(sql: str, params: Mapping[str, object]) -> list[tuple[Any, ...]]:
        wide = is_wide(params)
        if read_only and not wide:
            return await bounded_read(conn, sql, params, settings, timeout_ms)
        # Prepared: the settings' few fixed texts, not one per deadline or lock bound.
        fixed = settings.prepare and timeout_ms is None and lock_timeout_ms is None and not wide
        before = settings.sql(timeout_ms, custom_plans=wide, lock_timeout_ms=lock_timeout_ms)
        async with conn.pipeline() as pipeline:
            await conn.execute(before, prepare=fixed)
            cursor = await conn.execute(sql, params, prepare=settings.prepare and not wide)
            await pipeline.sync()
            return await _rows(cursor)

    return await _drive(steps, run)


async def write_transaction(
    conn: psycopg.AsyncConnection,
    steps: storage.HotSteps[R],
    settings: SessionSettings,
    timeout_ms: int | None,
    *,
    lock_timeout_ms: int | None,
    before_commit: Callable[[], None],
) -> R:
    """Drives write ``steps`` in one transaction of an autocommit ``conn``, in three round trips of one send each.

    ``BEGIN`` and the transaction's settings go as one simple query (no parameters: one
    message), each statement on its own (prepared where ``settings.prepare`` allows, unless
    wide), then ``COMMIT``; ``before_commit()`` runs just before it, and what it raises
    rolls the transaction back. Not pipelined on purpose: psycopg's pipeline mode sends each
    queued command with a send() of its own, and each send wakes the backend — the two
    pipelined round trips cost the client twice the CPU of these three (issue 46).
    Anything raised in between rolls back (a connection that broke is the pool's to drop).
    """
    began = False

    async def run(sql: str, params: Mapping[str, object]) -> list[tuple[Any, ...]]:
        nonlocal began
        wide = is_wide(params)
        if not began:
            await conn.execute("BEGIN; " + settings.sql(timeout_ms, custom_plans=wide, lock_timeout_ms=lock_timeout_ms))
            began = True
        return await _rows(await conn.execute(sql, params, prepare=settings.prepare and not wide))

    try:
        result = await _drive(steps, run)
        before_commit()
    except BaseException:
        if began:
            await _roll_back(conn)
        raise
    if began:
        await conn.execute("COMMIT")
    return result


async def _drive(
    steps: storage.HotSteps[R], run: Callable[[str, Mapping[str, object]], Awaitable[list[tuple[Any, ...]]]]
) -> R:
    """Runs each statement ``steps`` yield with ``run`` and sends it the rows; between slices of a wide request, others run."""
    try:
        statement = next(steps)
        while True:
            if statement is storage.PAUSE:
                await asyncio.sleep(0)
                statement = steps.send(None)
                continue
            sql, params = statement
            statement = steps.send(await run(sql, params))
    except StopIteration as done:
        result: R = done.value
        return result


async def _roll_back(conn: psycopg.AsyncConnection) -> None:
    """Ends ``conn``'s failed transaction; a connection that cannot is left to the pool (which drops it)."""
    if conn.closed or conn.info.transaction_status not in (
        psycopg.pq.TransactionStatus.INTRANS,
        psycopg.pq.TransactionStatus.INERROR,
    ):
        return
    try:
        await conn.execute("ROLLBACK")
    except psycopg.Error as error:  # the error that brought us here is the one the caller hears
        log.warning("rollback failed", extra={"error": type(error).__name__})


async def bounded_read(
    conn: psycopg.AsyncConnection, sql: str, params: Mapping[str, object], settings: SessionSettings, ms: int | None
) -> list[tuple[Any, ...]]:
    """One read, cancelled in the server (psycopg does, on cancellation) when its time is up."""
    ms = settings.statement_timeout_ms if ms is None else ms
    try:
        async with asyncio.timeout(ms / 1000 if ms else None):
            return await _rows(await conn.execute(sql, params, prepare=settings.prepare))
    except TimeoutError:
        log.warning("database unavailable (read timed out)", extra={"ms": ms})
        raise StoreUnavailableError("the offset store's database did not answer in time") from None


async def _rows(cursor: psycopg.AsyncCursor[Any]) -> list[tuple[Any, ...]]:
    if cursor.description is None:
        return []
    if cursor.rowcount <= FETCH_SLICE:
        return await cursor.fetchall()
    rows: list[tuple[Any, ...]] = []
    while batch := await cursor.fetchmany(FETCH_SLICE):  # a slice at a time: 10,000 rows would hold the loop
        rows.extend(batch)
        await asyncio.sleep(0)
    return rows


@contextlib.asynccontextmanager
async def on_primary(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """Closes ``conn`` when it turns out to be on a standby (a failover demoted its server): the pool replaces it."""
    try:
        yield
    except psycopg.errors.ReadOnlySqlTransaction:
        await conn.close()
        raise
