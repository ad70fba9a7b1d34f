"""The hot pool's connection check: free on the hot path, a round trip only for a connection that may be dead.

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

__all__ = ["IDLE_CHECK_SECONDS", "QuietCheck", "connection_lost"]

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
    try:
        ready, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True  # no socket to look at: let the round trip tell
    return bool(ready)


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
