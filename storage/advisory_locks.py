"""The store's advisory locks: waiting for one with a bound, and naming the session that holds it.

Any role that can connect may take an advisory lock on any key, the store's well-known ones
included (issue 34 finding 7). So no wait for one is unbounded, and a wait given up says who
holds the lock (pid, role, application, address): an operator can then ask that session to
stop or end it with ``pg_terminate_backend``.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Connection, func, select, text

_log = logging.getLogger(__name__)

__all__ = ["LockWaitStopped", "LockWaitTimedOut", "describe_holder", "wait_for_xact_lock"]

#: How often a waiter tries the lock again (and looks at its stop event).
POLL_SECONDS = 0.25

# A bigint key is split by PostgreSQL into classid (high 32 bits) and objid (low 32 bits),
# with objsubid 1; a granted row is the holder. Another database's lock on the same key is
# not ours.
_HOLDER = text(
    """
    SELECT a.pid, a.usename, a.application_name, host(a.client_addr) AS client_addr
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.classid = CAST(:classid AS oid) AND l.objid = CAST(:objid AS oid)
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.pid <> pg_backend_pid()
    ORDER BY l.pid
    """
)


class LockWaitTimedOut(Exception):
    """An advisory lock stayed taken for the whole wait; the message names its holder."""


class LockWaitStopped(Exception):
    """The wait for an advisory lock was stopped (SIGTERM) before the lock was free."""


def describe_holder(conn: Connection, key: int) -> str:
    """One phrase naming the sessions that hold advisory lock `key` (``pid 12 (role r, ...)``)."""
    rows = conn.execute(_HOLDER, {"classid": (key >> 32) & 0xFFFF_FFFF, "objid": key & 0xFFFF_FFFF}).all()
    if not rows:
        return "a session that has released it since"
    named = []
    for row in rows:
        where = f", from {row.client_addr}" if row.client_addr else ""
        named.append(f"pid {row.pid} (role {row.usename}, application {row.application_name!r}{where})")
    return ", ".join(named)


def wait_for_xact_lock(
    conn: Connection, key: int, *, what: str, timeout: float, stop: threading.Event | None = None
) -> None:
    """Take transaction-level advisory lock `key` on `conn`, waiting `timeout` seconds at most.

    Tries the lock every :data:`POLL_SECONDS` instead of blocking in the database, so that
    `stop` (set by a signal handler) ends the wait at once. Raises :class:`LockWaitTimedOut`
    naming the holder, or :class:`LockWaitStopped`.
    """
    deadline = time.monotonic() + timeout
    said = False
    while not conn.execute(select(func.pg_try_advisory_xact_lock(key))).scalar_one():
        if not said:
            # Said when the wait starts, not only when it gives up: a start that waits minutes
            # for a held migration lock must not look like a hang.
            _log.warning(
                "waiting for %s (advisory lock %d), held by %s; giving up after %g s",
                what,
                key,
                describe_holder(conn, key),
                timeout,
            )
            said = True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LockWaitTimedOut(
                f"{what} (advisory lock {key}) is held by {describe_holder(conn, key)}; "
                f"gave up after {timeout:g} s: stop that session (SELECT pg_terminate_backend(pid)) and start again"
            )
        if stop is None:
            time.sleep(min(POLL_SECONDS, remaining))
        elif stop.wait(min(POLL_SECONDS, remaining)):
            raise LockWaitStopped(f"stopped while waiting for {what}")
