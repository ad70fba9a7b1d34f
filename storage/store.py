"""The server's handle on the database: one transaction per operation, database faults made typed.

The servicer only ever talks to :class:`Store`. Reads of one statement run on an
autocommit connection (one round trip). Concurrent commits and joins coalesce into one
transaction (group commit, :class:`WriteBatcher`): while one batch is in the database
the next one gathers, and each request keeps its own outcome.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
import psycopg_pool
import sqlalchemy.exc
from sqlalchemy import Connection, Engine

from offsetstore import storage
from offsetstore.core.errors import OffsetStoreError, StoreUnavailableError
from offsetstore.core.types import (
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
from offsetstore.storage.validate import MAX_RESPONSE_BYTES

log = logging.getLogger(__name__)

R = TypeVar("R")

# Conflicts PostgreSQL resolves by aborting one side; the whole transaction is safe to rerun.
_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
ATTEMPTS = 3
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


def _cause(error: BaseException) -> tuple[BaseException | None, bool]:
    """(psycopg's error under ``error``, whether the connection was lost) for SQLAlchemy's or psycopg's own."""
    if isinstance(error, sqlalchemy.exc.DBAPIError):
        return error.orig, error.connection_invalidated
    if isinstance(error, psycopg.Error):
        # psycopg alone (the asyncio hot path): the connection it failed on says whether it broke.
        pgconn = error.pgconn
        return error, pgconn is not None and pgconn.status == psycopg.pq.ConnStatus.BAD
    return None, False


def retryable(error: BaseException) -> bool:
    """Whether PostgreSQL aborted the transaction for a conflict: the whole of it is safe to rerun."""
    return isinstance(_cause(error)[0], _RETRYABLE)


def classify(name: str, error: BaseException) -> OffsetStoreError | None:
    """What a failure of the operation ``name`` means to its caller; None where it is not the database's.

    Database errors are told apart by psycopg's classes, whichever layer (SQLAlchemy's
    sync or asyncio engine, or psycopg alone on the hot path) raised them.
    """
    if isinstance(error, (sqlalchemy.exc.TimeoutError, psycopg_pool.PoolTimeout)):
        log.warning("database pool exhausted", extra={"operation": name})
        return StoreUnavailableError("the offset store's database is busy")
    cause, invalidated = _cause(error)
    if cause is None:
        return None
    sqlstate = getattr(cause, "sqlstate", None) or ""
    if (
        invalidated
        or isinstance(cause, _UNAVAILABLE)
        # Class 57, operator intervention (psycopg gives 57P01-57P03 classes of their own).
        or sqlstate.startswith("57")
        # No SQLSTATE at all: the failure happened in reaching the server, not in a statement.
        or (isinstance(cause, psycopg.OperationalError) and not sqlstate)
    ):
        # Also when COMMIT itself failed: the outcome is unknown, so never report OK.
        log.warning("database unavailable", extra={"operation": name, "error": type(cause).__name__})
        return StoreUnavailableError("the offset store's database is unavailable")
    return None


# When the current caller gives up (time.monotonic()), and whether it is still there.
_deadline: contextvars.ContextVar[tuple[float, Callable[[], bool]] | None] = contextvars.ContextVar(
    "offsetstore_deadline", default=None
)


def caller_bound() -> tuple[float, Callable[[], bool]] | None:
    """(when the current caller gives up, whether it is still there), as :func:`deadline` set it; None: no bound."""
    return _deadline.get()


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
    """Runs each storage operation in its own transaction and classifies database failures.

    ``write_flushers`` threads write the batches of commits and joins (see
    :class:`WriteBatcher`); each holds one pool connection while it writes.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        statement_timeout_ms: int = 5000,
        observe: Callable[[str, float], None] | None = None,
        write_flushers: int = 2,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.engine = engine
        self.statement_timeout_ms = statement_timeout_ms
        #: The most one FetchOffsets or DescribeGroup answer may hold; larger ones come in pages.
        self.max_response_bytes = max_response_bytes
        #: Called with each operation's name and duration in seconds, failures included (metrics).
        self.observe = observe
        #: Called with the number of groups each expiry removed (metrics).
        self.expired: Callable[[int], None] | None = None
        # One-statement reads need no BEGIN and COMMIT: a statement is its own snapshot.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        # The health probe's own pool: the engine's settings, none of its request connections.
        self._health_pool = engine.pool.recreate()
        self._health: Any = None
        self._health_lock = threading.Lock()
        #: Group-commit flushers; the asyncio server's store (AsyncStore) runs as many.
        self.write_flushers = write_flushers
        self.writes = WriteBatcher(self, flushers=write_flushers)

    @property
    def pool_size(self) -> int:
        """Connections the engine's pool holds at most (the asyncio server's store holds as many)."""
        size = getattr(self.engine.pool, "size", None)
        return size() if callable(size) else 8

    def _timeout_ms(self, bound: tuple[float, Callable[[], bool]] | None) -> int | None:
        """The statement timeout ``bound``'s deadline asks for; None where the engine's own is shorter."""
        if bound is None:
            return None
        # Keep a margin for the reply to reach the caller.
        ms = int((bound[0] - time.monotonic()) * 900)
        if ms <= 0:
            raise StoreUnavailableError("the caller's deadline passed before the database answered")
        return ms if ms < self.statement_timeout_ms else None

    @staticmethod
    def _set_timeout(conn: Connection, ms: int | None) -> None:
        if ms is not None:
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")

    @staticmethod
    def _caller_gone() -> bool:
        bound = _deadline.get()
        return bound is not None and not bound[1]()

    def run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs ``operation(conn, *args, **kwargs)`` in a transaction of its own."""
        return self._timed(
            operation.__name__, lambda: self._attempts(operation.__name__, self._transaction, operation, args, kwargs)
        )

    def read(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs a read of ONE statement on an autocommit connection: one round trip, one snapshot.

        Where the caller's deadline needs a shorter statement timeout, it runs as :meth:`run` does.
        """
        return self._timed(
            operation.__name__, lambda: self._attempts(operation.__name__, self._read, operation, args, kwargs)
        )

    def _timed(self, name: str, call: Callable[[], R]) -> R:
        started = time.perf_counter()
        try:
            return call()
        finally:
            if self.observe is not None:
                self.observe(name, time.perf_counter() - started)

    def _transaction(self, operation: Callable[..., R], args: tuple, kwargs: dict) -> R:
        ms = self._timeout_ms(_deadline.get())
        with self.engine.begin() as conn:
            self._set_timeout(conn, ms)
            result = operation(conn, *args, **kwargs)
            if self._caller_gone():
                # Rolled back: nobody would hear that it landed.
                raise StoreUnavailableError("the caller went away before the transaction committed")
            return result

    def _read(self, operation: Callable[..., R], args: tuple, kwargs: dict) -> R:
        if self._timeout_ms(_deadline.get()) is not None:
            return self._transaction(operation, args, kwargs)
        with self._autocommit.connect() as conn:
            return operation(conn, *args, **kwargs)

    def _attempts(self, name: str, body: Callable[..., R], *args: Any) -> R:
        """``body(*args)``, again where PostgreSQL aborted it for a conflict; database faults made typed."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return body(*args)
            except (sqlalchemy.exc.DBAPIError, sqlalchemy.exc.TimeoutError) as error:
                if attempt < ATTEMPTS and retryable(error):
                    continue
                typed = classify(name, error)
                if typed is None:
                    raise
                raise typed from error
        raise AssertionError("unreachable")

    def token_key(self) -> bytes:
        """The store's page-token key (read once)."""
        return self.run(storage.token_key)

    def ping(self) -> bool:
        """True when the database answers a trivial query.

        On a connection of its own, not one of the request pool: a busy server whose pool
        is all in use is still healthy, and a load balancer must not drain it for that.
        """
        with self._health_lock:
            try:
                if self._health is None:
                    self._health = self._health_pool.connect()
                    self._health.driver_connection.autocommit = True
                with self._health.cursor() as cur:
                    cur.execute("SELECT 1")
                    cur.fetchone()
                return True
            except (psycopg.Error, sqlalchemy.exc.SQLAlchemyError):
                if self._health is not None:
                    self._health.invalidate()
                    self._health = None
                return False

    def commit_offsets(
        self, group_id: str, commits: Sequence[OffsetCommit], *, generation: int = 0, actor: str = ""
    ) -> list[CommittedOffset]:
        if not commits:  # nothing to write: only the generation is checked
            return self.read(storage.commit_offsets, group_id, commits, generation=generation, actor=actor)
        outcome = self._timed(
            "commit_offsets", lambda: self._write(storage.CommitRequest(group_id, commits, generation, actor))
        )
        assert isinstance(outcome, list)
        return outcome

    def fetch_offsets(
        self, group_id: str, topics: storage.SelectionArg = None, *, page_size: int = 0, page_token: str = ""
    ) -> FetchResult:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, self.token_key())
        return self.read(storage.fetch_offsets, group_id, topics, page)

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
        generation = self._timed(
            "join_group", lambda: self._write(storage.JoinRequest(group_id, member_id, member_host))
        )
        assert isinstance(generation, int)
        return generation

    def _write(self, request: storage.WriteRequest) -> storage.WriteOutcome:
        storage.check_write(request)
        return self.writes.submit(request)

    def list_groups(self, prefix: str = "", *, page_size: int = 0, page_token: str = "") -> Page[GroupSummary]:
        return self.run(storage.list_groups, prefix, page_size=page_size, page_token=page_token)

    def describe_group(self, group_id: str, *, page_size: int = 0, page_token: str = "") -> GroupDescription:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, self.token_key())
        return self.read(storage.describe_group, group_id, page)

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
        from offsetstore.storage import retention

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
        self.writes.stop()
        with self._health_lock:
            if self._health is not None:
                self._health.close()
                self._health = None
            self._health_pool.dispose()
        self.engine.dispose()


class _Write:
    """A caller's request waiting for its batch: ``outcome`` is set, then ``done``."""

    __slots__ = ("request", "bound", "done", "outcome")

    def __init__(self, request: storage.WriteRequest, bound: tuple[float, Callable[[], bool]] | None) -> None:
        self.request = request
        self.bound = bound
        self.done = threading.Event()
        self.outcome: storage.WriteOutcome | BaseException | object = None

    def finish(self, outcome: storage.WriteOutcome | BaseException | object) -> None:
        self.outcome = outcome
        self.done.set()


class _CallersLeft(Exception):
    """Some callers left before the batch committed: roll back, redo without them."""

    def __init__(self, gone: list[_Write]) -> None:
        self.gone = gone


# The batch failed for a reason that may be one request's (a lock wait that ran out, a
# statement that failed): each request is then run again alone, in its caller's thread.
_ALONE = object()
# Up to this much goes into one batch; a larger request is a batch of its own.
_MAX_BATCH_REQUESTS = 512
_MAX_BATCH_OFFSETS = 10_000


class WriteBatcher:
    """Group commit: concurrent commits and joins share one transaction, one statement and one WAL flush.

    Callers queue a validated request and wait. Each of ``flushers`` threads takes
    everything queued whenever it is free, so while one batch is in the database the
    next one gathers (PostgreSQL's own group-commit idea; no timer, no fixed wait).
    Each request keeps its own outcome (:func:`storage.write_batch`). The batch's
    statement timeout is that of its most pressed caller; a caller that left before
    COMMIT has its request taken out and the rest redone, so a caller that went away
    never has its request committed. A reply is sent only after COMMIT returned.
    """

    def __init__(self, store: Store, *, flushers: int = 2) -> None:
        if flushers < 1:
            raise ValueError("write_flushers must be >= 1")
        self.store = store
        self._queue: deque[_Write] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._started = False
        # Started by the first write: a Store that only reads (the scrapes' own) runs none.
        self._threads = [
            threading.Thread(target=self._loop, name=f"offsetstore-writes-{n}", daemon=True) for n in range(flushers)
        ]

    def submit(self, request: storage.WriteRequest) -> storage.WriteOutcome:
        """Waits for ``request``'s batch; returns its outcome or raises its error."""
        bound = _deadline.get()
        self.store._timeout_ms(bound)  # a deadline already past never reaches the database
        write = _Write(request, bound)
        with self._lock:
            if self._stopped:
                raise StoreUnavailableError("the offset store is shutting down")
            if not self._started:
                self._started = True
                for thread in self._threads:
                    thread.start()
            self._queue.append(write)
            self._wake.notify()
        write.done.wait()
        outcome = write.outcome
        if outcome is _ALONE:
            outcome = self.store._attempts(
                "write_batch", self.store._transaction, storage.write_batch, ([request],), {}
            )[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    def stop(self) -> None:
        """Writes what is queued, then ends the flushers."""
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopped:
                    self._wake.wait()
                if not self._queue:
                    return
                batch = [self._queue.popleft()]
                size = len(getattr(batch[0].request, "commits", ()))
                while self._queue and len(batch) < _MAX_BATCH_REQUESTS:
                    size += len(getattr(self._queue[0].request, "commits", ()))
                    if size > _MAX_BATCH_OFFSETS:
                        break
                    batch.append(self._queue.popleft())
            try:
                self._flush(batch)
            except BaseException as error:  # noqa: BLE001 - no caller may wait forever
                log.exception("write batch crashed")
                for write in batch:
                    if not write.done.is_set():
                        write.finish(error)

    def _flush(self, batch: list[_Write]) -> None:
        live = []
        for write in batch:
            if write.bound is None:
                live.append(write)
            elif not write.bound[1]():
                write.finish(StoreUnavailableError("the caller went away before the transaction committed"))
            elif write.bound[0] <= time.monotonic():
                write.finish(StoreUnavailableError("the caller's deadline passed before the database answered"))
            else:
                live.append(write)
        while live:
            try:
                outcomes = self.store._attempts("write_batch", self._transaction, live)
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

    def _transaction(self, live: list[_Write]) -> list[storage.WriteOutcome]:
        timeouts = []
        for write in live:
            try:
                timeouts.append(self.store._timeout_ms(write.bound))
            except StoreUnavailableError:
                timeouts.append(1)  # its deadline is past: it ends the batch at once, then runs alone
        ms = min((t for t in timeouts if t is not None), default=None)
        with self.store.engine.begin() as conn:
            self.store._set_timeout(conn, ms)
            outcomes = storage.write_batch(conn, [write.request for write in live])
            gone = [write for write in live if write.bound is not None and not write.bound[1]()]
            if gone:
                raise _CallersLeft(gone)  # rolled back
            return outcomes


def one_requests_fault(error: OffsetStoreError) -> bool:
    """A batch that timed out or waited too long for a lock may have waited for one request's group."""
    cause = error.__cause__
    orig = getattr(cause, "orig", None)
    return isinstance(orig, (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable))
