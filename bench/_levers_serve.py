"""``offsetstore serve`` with some of issue 33's levers put back as they were, so bench/levers.py can compare.

``OFFSETSTORE_BENCH_BEFORE`` names the levers to undo (comma-separated, see :data:`BEFORE`).
The patches are made at import, so the spawned serving processes (which import this
script again as ``__mp_main__``) run the same code as the supervisor. A bench hook, kept
out of the product: the product has no switch for the old behaviour.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import psycopg_pool

from offsetstore.runtime import _write_batcher, async_store
from offsetstore.runtime._flushers import Flushers
from offsetstore.runtime._hot_async import _drive, drive_steps_async
from offsetstore.runtime._read_batch import ReadBatcher
from offsetstore.server import gate
from offsetstore.storage import engine


class _CheckEveryCheckout:
    """psycopg_pool's own check on every checkout: an empty query, one round trip."""

    async def __call__(self, conn: Any) -> None:
        await psycopg_pool.AsyncConnectionPool.check_connection(conn)


def _alone(operation: str) -> None:
    """``operation``'s reads run alone again: its first statement rides no batch."""
    kind_of = ReadBatcher.kind_of

    def patched(self: ReadBatcher, statement: Any) -> Any:
        kind = kind_of(self, statement)
        return None if kind is None or kind.name == operation else kind

    ReadBatcher.kind_of = patched  # type: ignore[method-assign]


async def _pipelined(
    conn: Any, steps: Any, settings: Any, timeout_ms: Any, *, lock_timeout_ms: Any, before_commit: Any
) -> Any:
    """The write batch's transaction as issue 46 found it: BEGIN, the settings and the batch in one pipeline, COMMIT."""
    async with conn.pipeline(), conn.transaction():
        result = await drive_steps_async(conn, steps, settings, timeout_ms, lock_timeout_ms=lock_timeout_ms)
        before_commit()
        return result


async def _merged_begin(
    conn: Any, steps: Any, settings: Any, timeout_ms: Any, *, lock_timeout_ms: Any, before_commit: Any
) -> Any:
    """The write batch's transaction in two round trips (issue 55, not shipped): BEGIN, the settings and the
    statement as one simple query, its parameters merged in as literals (psycopg's client-side binding), then
    COMMIT. PostgreSQL (13 and later) times each statement of a query string on its own, so the settings
    before the statement still bound it."""
    import psycopg

    from offsetstore.runtime._hot_async import _drive, _roll_back, _rows
    from offsetstore.storage.steps import is_wide

    began = False

    async def run(sql: str, params: Mapping[str, object]) -> Any:
        nonlocal began
        wide = is_wide(params)
        if began:
            return await _rows(await conn.execute(sql, params, prepare=settings.prepare and not wide))
        began = True
        begin = "BEGIN; " + settings.sql(timeout_ms, custom_plans=wide, lock_timeout_ms=lock_timeout_ms)
        cursor = psycopg.AsyncClientCursor(conn)
        await cursor.execute(f"{begin}; {cursor.mogrify(sql, params)}")  # no parameters left: sent verbatim
        while cursor.nextset():  # past BEGIN's and the settings' results
            pass
        return await _rows(cursor)

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


_ASYNCPG: dict[int, Any] = {}  # id(loop) -> this process's asyncpg pool (the serving process's one loop)


def _positional(sql: str, params: Mapping[str, object]) -> tuple[str, list[object]]:
    """psycopg's ``%(name)s`` placeholders as asyncpg's ``$n``, each sent as text (the array literals psycopg sends)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}::text"

    return re.sub(r"%\((\w+)\)s", number, sql), [params[name] for name in names]


async def _on_asyncpg(
    conn: Any, steps: Any, settings: Any, timeout_ms: Any, *, lock_timeout_ms: Any, before_commit: Any
) -> Any:
    """The write batch's transaction on asyncpg: the same three round trips (BEGIN with the settings, the
    prepared write, COMMIT), on a pool of its own sized like the hot pool (psycopg's connection is checked
    out and left unused: one select() of its pool's quiet check, here on both sides)."""
    import asyncio

    import asyncpg

    loop = id(asyncio.get_running_loop())
    if loop not in _ASYNCPG:
        info = conn.info
        _ASYNCPG[loop] = await asyncpg.create_pool(
            host=info.host, port=info.port, user=info.user, database=info.dbname, min_size=2, max_size=8
        )
    async with _ASYNCPG[loop].acquire() as apg:

        async def run(sql: str, params: Mapping[str, object]) -> list[tuple[Any, ...]]:
            query, args = _positional(sql, params)
            return [tuple(row) for row in await apg.fetch(query, *args)]

        await apg.execute("BEGIN; " + settings.sql(timeout_ms, custom_plans=False, lock_timeout_ms=lock_timeout_ms))
        try:
            result = await _drive(steps, run)
            before_commit()
        except BaseException:
            await apg.execute("ROLLBACK")
            raise
        await apg.execute("COMMIT")
        return result


async def _timed_first(self: Any, requests: Any) -> bytes:
    """The gate's read of a request as issue 46 found it: a timer of its own per call."""
    import asyncio

    async with asyncio.timeout(self.seconds):
        data: bytes = await anext(requests)
        return data


#: lever name -> how to undo it.
BEFORE = {
    "pool-check": lambda: setattr(engine, "QuietCheck", _CheckEveryCheckout),
    "read-coalescing": lambda: _alone("fetch_offsets"),
    "describe-coalescing": lambda: _alone("describe_group"),
    # Issue 46's: asyncio's own loop, through the product's own setting (read before the settings load).
    "uvloop": lambda: os.environ.__setitem__("OFFSETSTORE_EVENT_LOOP", "asyncio"),
    "commit-round-trips": lambda: setattr(_write_batcher, "write_transaction", _pipelined),
    # Issue 55, the other way round (not shipped): the "before" server sends BEGIN, the settings and the batch's
    # statement as one simple query (two round trips, not three).
    "merged-begin": lambda: setattr(_write_batcher, "write_transaction", _merged_begin),
    "read-bound": lambda: setattr(gate._ReadBound, "first", _timed_first),
    # Issue 46's driver question, the other way round: the "before" server writes on asyncpg.
    "asyncpg": lambda: setattr(_write_batcher, "write_transaction", _on_asyncpg),
    # A free flusher takes whatever is queued at once, even while the other one is in the database.
    "gather": lambda: setattr(Flushers, "_ready", lambda self: bool(self._queue)),
}

for _lever in filter(None, os.environ.get("OFFSETSTORE_BENCH_BEFORE", "").split(",")):
    BEFORE[_lever]()

if _flushers := os.environ.get("OFFSETSTORE_BENCH_READ_FLUSHERS"):  # to weigh the read batcher's tasks
    _made = async_store.AsyncStore.__init__

    def _with_flushers(self: async_store.AsyncStore, config: async_store.StoreConfig) -> None:
        _made(self, dataclasses.replace(config, read_flushers=int(_flushers)))

    async_store.AsyncStore.__init__ = _with_flushers  # type: ignore[method-assign]

if __name__ == "__main__":
    from offsetstore.cli.main import main

    sys.exit(main(sys.argv[1:]))
