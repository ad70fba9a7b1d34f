"""The server's handle on the database: one transaction per operation, database faults made typed.

The servicer only ever talks to :class:`Store`. Reads of one statement run on an
autocommit connection (one round trip). Concurrent commits and joins coalesce into one
transaction (group commit, :class:`WriteBatcher`): while one batch is in the database
the next one gathers, and each request keeps its own outcome.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import psycopg
import sqlalchemy.exc
from sqlalchemy import Connection, Engine

from offsetstore import storage
from offsetstore.core.errors import StoreUnavailableError
from offsetstore.core.types import (
    CommittedOffset,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    Page,
    ResetRequest,
    ResetResult,
    TopicPartition,
    Watermark,
)
from offsetstore.storage import _group_commit as gc
from offsetstore.storage._calls import (
    ATTEMPTS,
    Bound,
    caller_bound,
    caller_gone,
    classify,
    deadline,
    retryable,
    timeout_ms,
)
from offsetstore.storage.retention import expiry
from offsetstore.storage.status import DEFAULT_RULES, StatusRules
from offsetstore.storage.validate import MAX_RESPONSE_BYTES

# ``deadline`` too: the server and the tests bound their calls with it from here.
__all__ = ["Store", "StoreObserver", "WriteBatcher", "deadline"]

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True)
class StoreObserver:
    """What a store reports as it runs (the metrics' seam); each hook may be None.

    Give it to the constructor (``Store(engine, observer=StoreObserver(...))``), or, for a
    registry built over a store that exists already, to :meth:`Store.observe_with`.
    """

    #: Called with each operation's name and duration in seconds, failures included.
    operation: Callable[[str, float], None] | None = None
    #: Called with the number of groups each expiry removed.
    expired: Callable[[int], None] | None = None


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
        observer: StoreObserver = StoreObserver(),
        observe: Callable[[str, float], None] | None = None,
        write_flushers: int = 2,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        status_rules: StatusRules = DEFAULT_RULES,
    ) -> None:
        self.engine = engine
        #: The status verdict's thresholds (storage/status.py), for DescribeGroup and the metrics.
        self.status_rules = status_rules
        self.statement_timeout_ms = statement_timeout_ms
        #: The most one FetchOffsets or DescribeGroup answer may hold; larger ones come in pages.
        self.max_response_bytes = max_response_bytes
        # The hooks (:class:`StoreObserver`), attributes of old: set them through the constructor
        # or :meth:`observe_with`; ``observe=`` alone is the operation hook, as before the observer.
        self.observe = observe or observer.operation
        self.expired = observer.expired
        # The health probe's own pool: the engine's settings, none of its request connections.
        self._health_pool = engine.pool.recreate()
        self._health: Any = None
        self._health_lock = threading.Lock()
        #: Group-commit flushers; the asyncio server's store (AsyncStore) runs as many.
        self.write_flushers = write_flushers
        self.writes = WriteBatcher(self, flushers=write_flushers)

    @property
    def observer(self) -> StoreObserver:
        """The hooks this store (and the :class:`AsyncStore` over it) reports to, read at each call."""
        return StoreObserver(self.observe, self.expired)

    def observe_with(
        self, *, operation: Callable[[str, float], None] | None = None, expired: Callable[[int], None] | None = None
    ) -> None:
        """Replaces the hooks given, the others stay: how a metrics registry built over this store attaches.

        A second registry built over the same store takes the hooks it gives over.
        """
        self.observe = operation or self.observe
        self.expired = expired or self.expired

    @property
    def pool_size(self) -> int:
        """Connections the engine's pool holds at most (the asyncio server's store holds as many)."""
        size = getattr(self.engine.pool, "size", None)
        return size() if callable(size) else 8

    def _timeout_ms(self, bound: Bound | None) -> int | None:
        """The statement timeout ``bound``'s deadline asks for; None where the engine's own is shorter."""
        return timeout_ms(bound, self.statement_timeout_ms)

    @staticmethod
    def _set_timeout(conn: Connection, ms: int | None) -> None:
        if ms is not None:
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")

    def run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs ``operation(conn, *args, **kwargs)`` in a transaction of its own."""
        name = operation.__name__
        return self._timed(name, lambda: self._attempts(name, lambda: self._transaction(operation, args, kwargs)))

    def read(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs a read in a transaction of its own: its timeouts are the transaction's settings (engine.py)."""
        return self.run(operation, *args, **kwargs)

    def _timed(self, name: str, call: Callable[[], R]) -> R:
        started = time.perf_counter()
        try:
            return call()
        finally:
            if self.observe is not None:
                self.observe(name, time.perf_counter() - started)

    def _transaction(self, operation: Callable[..., R], args: tuple[object, ...], kwargs: dict[str, object]) -> R:
        ms = self._timeout_ms(caller_bound())
        with self.engine.begin() as conn:
            self._set_timeout(conn, ms)
            result = operation(conn, *args, **kwargs)
            if caller_gone():
                # Rolled back: nobody would hear that it landed.
                raise StoreUnavailableError("the caller went away before the transaction committed")
            return result

    def _attempts(self, name: str, body: Callable[[], R]) -> R:
        """``body()``, again where PostgreSQL aborted it for a conflict; database faults made typed."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return body()
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

    def reset_offsets(self, request: ResetRequest, *, actor: str = "") -> ResetResult:
        return self.run(storage.reset_offsets, request, actor=actor)

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

    def describe_group(
        self, group_id: str, *, page_size: int = 0, page_token: str = "", lag_history: bool = False
    ) -> GroupDescription:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, self.token_key())
        return self.read(storage.describe_group, group_id, page, self.status_rules, lag_history)

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
        page = dict(page_size=page_size, page_token=page_token)
        return self.run(storage.list_offset_history, group_id, topics, since=since, until=until, **page)

    def report_watermarks(self, watermarks: Sequence[Watermark]) -> None:
        return self.run(storage.report_watermarks, watermarks)

    def expire_groups(
        self, idle_for: timedelta, *, prefix: str = "", limit: int = 0, execute: bool = False, actor: str = ""
    ) -> list[ExpiredGroup]:
        """Groups idle for ``idle_for``; with ``execute``, expires them, each in a transaction of its own.

        Returns the groups that expired (or would): one that became active meanwhile is left out.
        """
        candidates = self.run(expiry.idle_groups, idle_for, prefix=prefix, limit=limit)
        if not execute:
            return candidates
        expired = []
        for candidate in candidates:
            found = self.run(expiry.expire_group, candidate.group_id, idle_for, actor=actor)
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


class _Write(gc.Waiting):
    """A caller's request waiting for its batch in the caller's thread: ``outcome`` is set, then ``done``."""

    __slots__ = ("done", "outcome")

    def __init__(self, request: storage.WriteRequest, bound: Bound | None) -> None:
        super().__init__(request, bound)
        self.done = threading.Event()
        self.outcome: gc.Handed | None = None

    def finish(self, outcome: gc.Handed) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.done.set()


class WriteBatcher:
    """Group commit on threads: ``flushers`` threads take batches off one queue (rules: :mod:`._group_commit`)."""

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
        bound = caller_bound()
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
        assert write.outcome is not None
        if write.outcome is gc.ALONE:
            alone = self.store._attempts(
                "write_batch", lambda: self.store._transaction(storage.write_batch, ([request],), {})
            )
            return gc.outcome(alone[0])
        return gc.outcome(write.outcome)

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
                batch = gc.take_batch(self._queue)
            try:
                flush = gc.Flush(gc.waiting(batch), self.store._timeout_ms)
                while flush.live:
                    try:
                        outcomes = self.store._attempts("write_batch", partial(self._transaction, flush))
                    except Exception as error:
                        flush.failed(error)
                    else:
                        flush.succeeded(outcomes)
            except BaseException as error:  # noqa: BLE001 - no caller may wait forever
                gc.crashed(batch, error)

    def _transaction(self, flush: gc.Flush[_Write]) -> list[storage.WriteOutcome]:
        with self.store.engine.begin() as conn:
            self.store._set_timeout(conn, flush.timeout_ms())
            outcomes = storage.write_batch(conn, flush.requests())
            flush.check_callers()  # raises: rolled back
            return outcomes
