"""The hot pool (:func:`create_async_pool`) and its connection check: free on the hot path, a round trip only for a connection that may be dead.

psycopg_pool's :meth:`~psycopg_pool.AsyncConnectionPool.check_connection` sends an empty
query on every checkout: a whole round trip before every statement (14% of the serving
thread under a read load, issue 33). :class:`QuietCheck` asks the operating system instead:
an idle connection has nothing to read, so a socket that is readable while the connection
sits in the pool holds the server's goodbye (a terminated backend's FATAL, a shutdown) or
its end of file, or something unasked (a notice): only then, or when the connection was
not handed out for :data:`IDLE_CHECK_SECONDS` (a silent network may have dropped it), is
the empty query sent. A connection killed in the moment between the check and the
statement fails its statement instead: reads, and writes that never reached COMMIT, are
run again once on a fresh connection (:func:`connection_lost`, used by the async store).
"""

from __future__ import annotations

import select
import time
import weakref
from typing import Any

import psycopg
import psycopg_pool
import sqlalchemy.exc

from offsetstore.runtime._connect import admit_async
from offsetstore.storage import database_url
from offsetstore.storage.engine import SessionSettings

__all__ = ["IDLE_CHECK_SECONDS", "QuietCheck", "connection_lost", "create_async_pool"]

#: A connection not handed out for this long is checked with a round trip when next taken.
IDLE_CHECK_SECONDS = 5.0


class QuietCheck:
    """A ``check`` callback for psycopg_pool that costs a ``select()`` unless the connection may be dead."""

    def __init__(self, idle_seconds: float = IDLE_CHECK_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        # When each connection was last handed out; weak, so a closed connection is forgotten.
        self._taken: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

    async def __call__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        now = time.monotonic()
        taken, self._taken[conn] = self._taken.get(conn), now
        if conn.closed or conn.broken:
            raise psycopg.OperationalError("the pooled connection is closed")
        if taken is None or now - taken > self.idle_seconds or _readable(conn):
            await psycopg_pool.AsyncConnectionPool.check_connection(conn)


def _readable(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether the server sent something to a connection that asked for nothing (no blocking: a zero timeout)."""
    # poll, not select: the server raises its descriptor limit, and select refuses a descriptor past 1,023.
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True  # no socket to look at: let the round trip tell


#: The server ended the session (terminated, shut down, idle too long) or the link broke: the
#: statement that hears it never ran.
_ENDED = (
    psycopg.errors.AdminShutdown,
    psycopg.errors.CrashShutdown,
    psycopg.errors.IdleSessionTimeout,
    psycopg.errors.ConnectionException,
    psycopg.InterfaceError,
)


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` came from a connection that was dead when its statement went out or died under it."""
    if isinstance(error, sqlalchemy.exc.DBAPIError):
        if error.connection_invalidated:
            return True
        return error.orig is not None and connection_lost(error.orig)
    if isinstance(error, _ENDED):
        return True
    if isinstance(error, psycopg.Error):
        pgconn = error.pgconn
        return pgconn is not None and pgconn.status == psycopg.pq.ConnStatus.BAD
    return False


def create_async_pool(url: str, settings: SessionSettings, *, size: int = 8) -> psycopg_pool.AsyncConnectionPool[Any]:
    """A psycopg ``AsyncConnectionPool`` (not yet open) of autocommit connections to ``url``.

    The server's hot statements (the group commit's batch, the fetch) run on it without
    SQLAlchemy's layers, each after :meth:`SessionSettings.sql` in the same round trip
    (:mod:`.async_store`). Waiting longer than the connect timeout for a connection
    raises ``PoolTimeout``.
    """
    kwargs = settings.connect_kwargs()
    if settings.prepare:
        # Every hot statement says whether to prepare it (psycopg: None would forbid it even then).
        del kwargs["prepare_threshold"]
    return psycopg_pool.AsyncConnectionPool(
        database_url.conninfo(url, connect_timeout=kwargs.pop("connect_timeout")),
        kwargs={"autocommit": True, **kwargs},
        # A connection that died while idle in the pool (killed, a restart) is replaced when
        # taken instead of failing the call it was given to; the round trip that tells is paid
        # only where the socket or a long idle time says it may be dead (:class:`QuietCheck`).
        check=QuietCheck(),
        configure=lambda conn: admit_async(conn, settings),
        min_size=1,
        max_size=size,
        # psycopg_pool retries a failed connect with a doubling delay (1, 2, 4 ... s): after a
        # 30 s outage the pool found the restarted database 30 s late. Giving up after a
        # second instead lets the next call's wait start a fresh attempt at once.
        reconnect_timeout=1.0,
        timeout=settings.connect_timeout_s,
        open=False,
    )
