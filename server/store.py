"""The server's handle on the database: one transaction per operation, database faults made typed.

The servicer only ever talks to :class:`Store`. Coalescing concurrent commits into one
transaction (group commit) belongs here, behind ``Store.commit_offsets``, with each
request under its own savepoint so that one request's failure cannot touch another's.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
import sqlalchemy.exc
from sqlalchemy import Connection, Engine

from offsetstore.client.errors import StoreUnavailableError
from offsetstore.client.types import (
    Boundary,
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

from . import storage

log = logging.getLogger(__name__)

R = TypeVar("R")

# Conflicts PostgreSQL resolves by aborting one side; the whole transaction is safe to rerun.
_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
_ATTEMPTS = 3
# The database is gone, restarting, timed out or overloaded: the caller may try again later.
# Not every OperationalError qualifies (a statement too complex fails the same way each time).
_UNAVAILABLE = (
    psycopg.InterfaceError,  # the connection died between statements
    psycopg.errors.ConnectionException,  # SQLSTATE class 08
    psycopg.errors.OperatorIntervention,  # 57: admin/crash shutdown, starting up
    psycopg.errors.InsufficientResources,  # 53: too many connections, out of memory, disk full
    psycopg.errors.QueryCanceled,  # statement timeout (not an OperatorIntervention in psycopg)
    psycopg.errors.LockNotAvailable,
    # 25006: a standby, or a primary demoted by a failover, takes no writes until one is promoted.
    psycopg.errors.ReadOnlySqlTransaction,
    # 25P03: the server ended the session (idle_in_transaction_session_timeout).
    psycopg.errors.IdleInTransactionSessionTimeout,
    *_RETRYABLE,
)


def _unavailable(error: sqlalchemy.exc.DBAPIError) -> bool:
    cause = error.orig
    if error.connection_invalidated or isinstance(cause, _UNAVAILABLE):
        return True
    # No SQLSTATE at all: the failure happened in reaching the server, not in a statement.
    return isinstance(cause, psycopg.OperationalError) and cause.sqlstate is None


# When the current caller gives up (time.monotonic()), and whether it is still there.
_deadline: contextvars.ContextVar[tuple[float, Callable[[], bool]] | None] = contextvars.ContextVar(
    "offsetstore_deadline", default=None
)


@contextlib.contextmanager
def deadline(seconds: float | None, is_active: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """Bounds the database work of the operations run inside by the caller's ``seconds``.

    Each transaction's statement timeout becomes the smaller of the engine's and a
    little less than the time left, so the database gives up before the caller does
    and the caller hears UNAVAILABLE rather than a bare deadline; a transaction whose
    caller is gone is rolled back instead of committed.
    """
    token = _deadline.set(None if seconds is None else (time.monotonic() + seconds, is_active))
    try:
        yield
    finally:
        _deadline.reset(token)


class Store:
    """Runs each storage operation in its own transaction and classifies database failures."""

    def __init__(
        self,
        engine: Engine,
        *,
        statement_timeout_ms: int = 5000,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self.engine = engine
        self.statement_timeout_ms = statement_timeout_ms
        #: Called with each operation's name and duration in seconds, failures included (metrics).
        self.observe = observe
        #: Called with the number of groups each expiry removed (metrics).
        self.expired: Callable[[int], None] | None = None
        # The health probe's own pool: the engine's settings, none of its request connections.
        self._health_pool = engine.pool.recreate()
        self._health: Any = None
        self._health_lock = threading.Lock()

    def _bound(self, conn: Connection) -> None:
        bound = _deadline.get()
        if bound is None:
            return
        # Keep a margin for the reply to reach the caller.
        ms = int((bound[0] - time.monotonic()) * 900)
        if ms <= 0:
            raise StoreUnavailableError("the caller's deadline passed before the database answered")
        if ms < self.statement_timeout_ms:
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")

    @staticmethod
    def _caller_gone() -> bool:
        bound = _deadline.get()
        return bound is not None and not bound[1]()

    def run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs ``operation(conn, *args, **kwargs)`` in a transaction of its own."""
        started = time.perf_counter()
        try:
            return self._run(operation, *args, **kwargs)
        finally:
            if self.observe is not None:
                self.observe(operation.__name__, time.perf_counter() - started)

    def _run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                with self.engine.begin() as conn:
                    self._bound(conn)
                    result = operation(conn, *args, **kwargs)
                    if self._caller_gone():
                        # Rolled back: nobody would hear that it landed.
                        raise StoreUnavailableError("the caller went away before the transaction committed")
                    return result
            except sqlalchemy.exc.DBAPIError as error:
                cause = error.orig
                if isinstance(cause, _RETRYABLE) and attempt < _ATTEMPTS:
                    continue
                if _unavailable(error):
                    # Also when COMMIT itself failed: the outcome is unknown, so never report OK.
                    log.warning(
                        "database unavailable", extra={"operation": operation.__name__, "error": type(cause).__name__}
                    )
                    raise StoreUnavailableError("the offset store's database is unavailable") from error
                raise
            except sqlalchemy.exc.TimeoutError as error:
                log.warning("database pool exhausted", extra={"operation": operation.__name__})
                raise StoreUnavailableError("the offset store's database is busy") from error
        raise AssertionError("unreachable")

    def ping(self) -> bool:
        """True when the database answers a trivial query.

        On a connection of its own, not one of the request pool: a busy server whose pool
        is all in use is still healthy, and a load balancer must not drain it for that.
        """
        with self._health_lock:
            try:
                if self._health is None:
                    self._health = self._health_pool.connect()
                with self._health.cursor() as cur:
                    cur.execute("SELECT 1")
                    cur.fetchone()
                self._health.rollback()
                return True
            except (psycopg.Error, sqlalchemy.exc.SQLAlchemyError):
                if self._health is not None:
                    self._health.invalidate()
                    self._health = None
                return False

    def commit_offsets(
        self, group_id: str, commits: Sequence[OffsetCommit], *, generation: int = 0, actor: str = ""
    ) -> list[CommittedOffset]:
        return self.run(storage.commit_offsets, group_id, commits, generation=generation, actor=actor)

    def fetch_offsets(self, group_id: str, topics: storage.SelectionArg = None) -> FetchResult:
        return self.run(storage.fetch_offsets, group_id, topics)

    def reset_offsets(
        self,
        group_id: str,
        topics: storage.SelectionArg = None,
        *,
        all_topics: bool = False,
        to_offset: int | None = None,
        shift_by: int | None = None,
        to_boundary: Boundary | None = None,
        to_commit_time: datetime | None = None,
        dry_run: bool = False,
        actor: str = "",
    ) -> ResetResult:
        return self.run(
            storage.reset_offsets,
            group_id,
            topics,
            all_topics=all_topics,
            to_offset=to_offset,
            shift_by=shift_by,
            to_boundary=to_boundary,
            to_commit_time=to_commit_time,
            dry_run=dry_run,
            actor=actor,
        )

    def delete_offsets(
        self, group_id: str, topics: storage.SelectionArg = None, *, all_topics: bool = False, actor: str = ""
    ) -> list[TopicPartition]:
        return self.run(storage.delete_offsets, group_id, topics, all_topics=all_topics, actor=actor)

    def join_group(self, group_id: str, member_id: str = "", member_host: str = "") -> int:
        return self.run(storage.join_group, group_id, member_id, member_host)

    def list_groups(self, prefix: str = "", *, page_size: int = 0, page_token: str = "") -> Page[GroupSummary]:
        return self.run(storage.list_groups, prefix, page_size=page_size, page_token=page_token)

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.run(storage.describe_group, group_id)

    def list_offset_history(
        self,
        group_id: str,
        topics: storage.SelectionArg = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[OffsetChange]:
        return self.run(
            storage.list_offset_history,
            group_id,
            topics,
            since=since,
            until=until,
            page_size=page_size,
            page_token=page_token,
        )

    def report_watermarks(self, watermarks: Sequence[Watermark]) -> None:
        return self.run(storage.report_watermarks, watermarks)

    def expire_groups(
        self, idle_for: timedelta, *, prefix: str = "", limit: int = 0, execute: bool = False, actor: str = ""
    ) -> list[ExpiredGroup]:
        """Groups idle for ``idle_for``; with ``execute``, expires them, each in a transaction of its own.

        Returns the groups that expired (or would): one that became active meanwhile is left out.
        """
        from . import retention

        candidates = self.run(retention.idle_groups, idle_for, prefix=prefix, limit=limit)
        if not execute:
            return candidates
        expired = []
        for candidate in candidates:
            found = self.run(retention.expire_group, candidate.group_id, idle_for, actor=actor)
            if found is not None:
                expired.append(found)
        if expired and self.expired is not None:
            self.expired(len(expired))
        return expired

    def dispose(self) -> None:
        with self._health_lock:
            if self._health is not None:
                self._health.close()
                self._health = None
            self._health_pool.dispose()
        self.engine.dispose()
