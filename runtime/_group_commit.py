"""The rules of group commit, without I/O: what goes into a batch, its timeout, and who hears what.

Concurrent commits and joins share one transaction, one statement and one WAL flush.
Callers queue a validated request and wait; each flusher takes everything queued
whenever it is free, so while one batch is in the database the next one gathers
(PostgreSQL's own group-commit idea; no timer, no fixed wait). Each request keeps its
own outcome (:func:`storage.write_batch`). The batch's statement timeout is that of its
most pressed caller; a caller that left before COMMIT has its request taken out and the
rest redone, so a caller that went away never has its request committed. A reply is
sent only after COMMIT returned. A flusher's batch waits for a group's lock
:data:`BATCH_LOCK_TIMEOUT_MS` at most (asyncio driver); a batch that timed out, waited too
long for a lock or failed in a statement runs each request alone, by its own caller, so one
locked group cannot fail the others, nor stall them by holding the flushers. A request run
alone is a batch of one under the same rules, without the short lock wait: its caller gone
before COMMIT, it is rolled back and the caller hears why (:data:`GONE`).

The driver does only the I/O: :class:`~offsetstore.runtime._write_batcher.AsyncWriteBatcher`
(asyncio tasks and an event; callers in threads reach it through the sync
:class:`~offsetstore.runtime.store.Store`). It runs, per batch (and per request handed
:data:`ALONE`, with ``[the request]`` and no lock timeout)::

    flush = Flush(waiting(take_batch(queue)), timeout_ms, BATCH_LOCK_TIMEOUT_MS)
    while flush.live:
        try:
            outcomes = <one transaction: the settings (flush.timeout_ms, flush.lock_timeout_ms),
                        write_batch(flush.requests()), flush.check_callers(), COMMIT>
        except Exception as error:
            flush.failed(error)
        else:
            flush.succeeded(outcomes)
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from offsetstore.core.errors import OffsetStoreError, StoreUnavailableError
from offsetstore.runtime._calls import Bound, lock_wait_ran_out, one_requests_fault
from offsetstore.storage.writes import WriteOutcome, WriteRequest

log = logging.getLogger(__name__)

#: Up to this much goes into one batch; a larger request is a batch of its own.
MAX_BATCH_REQUESTS = 512
MAX_BATCH_OFFSETS = 10_000

#: How long a flusher's batch waits for a group's lock before its requests run alone, each
#: by its own caller: a group held in a long transaction stalls only its own callers.
BATCH_LOCK_TIMEOUT_MS = 50

GONE = "the caller went away before the transaction committed"
LATE = "the caller's deadline passed before the database answered"


class _Alone:
    """The outcome that sends a request back to its caller to run alone."""

    def __repr__(self) -> str:
        return "ALONE"


#: The batch failed for a reason that may be one request's (a lock wait that ran out, a
#: statement that failed): each request is then run again alone, by its own caller.
ALONE = _Alone()

#: What a waiting caller is handed: its outcome, its error, or :data:`ALONE`.
Handed = WriteOutcome | BaseException | _Alone


class Waiting:
    """A caller's request waiting for its batch; a driver adds how the caller waits (:meth:`finish`)."""

    __slots__ = ("request", "bound")

    def __init__(self, request: WriteRequest, bound: Bound | None) -> None:
        self.request = request
        self.bound = bound

    def gone(self) -> bool:
        """The caller left: its context says it is no longer there."""
        return self.bound is not None and not self.bound[1]()

    def finish(self, outcome: Handed) -> None:
        raise NotImplementedError


W = TypeVar("W", bound=Waiting)


class CallersLeft(Exception):
    """Some callers left before the batch committed: roll back, redo without them."""

    def __init__(self, gone: list[Waiting]) -> None:
        super().__init__(f"{len(gone)} caller(s) left")
        self.gone = gone


def take_batch(queue: deque[W]) -> list[W]:
    """Takes the next batch off the head of ``queue`` (not empty): up to the request and offset limits."""
    batch = [queue.popleft()]
    size = _offsets(batch[0])
    while queue and len(batch) < MAX_BATCH_REQUESTS:
        size += _offsets(queue[0])
        if size > MAX_BATCH_OFFSETS:
            break
        batch.append(queue.popleft())
    return batch


def _offsets(write: Waiting) -> int:
    return len(getattr(write.request, "commits", ()))


def waiting(batch: list[W]) -> list[W]:
    """The requests of ``batch`` whose callers still wait; the others hear why they were left out."""
    live = []
    for write in batch:
        if write.gone():
            write.finish(StoreUnavailableError(GONE))
        elif write.bound is not None and write.bound[0] <= time.monotonic():
            write.finish(StoreUnavailableError(LATE))
        else:
            live.append(write)
    return live


class Flush(Generic[W]):
    """One batch through the database: the callers still waiting (:attr:`live`), and what each hears.

    ``timeout_ms`` is the store's: the statement timeout a caller's bound asks for, or None.
    With ``lock_timeout_ms``, the batch waits for a group's lock that long at most (the
    driver sets it), and a request whose lock wait ran out runs alone, by its own caller,
    with the whole lock timeout: a flusher never waits long on one group's lock.
    """

    def __init__(
        self, live: list[W], timeout_ms: Callable[[Bound | None], int | None], lock_timeout_ms: int | None = None
    ) -> None:
        self._timeout = timeout_ms
        self.live = live
        self.lock_timeout_ms = lock_timeout_ms

    def requests(self) -> list[WriteRequest]:
        return [write.request for write in self.live]

    def offsets(self) -> int:
        """How many offsets the batch writes."""
        return sum(_offsets(write) for write in self.live)

    def timeout_ms(self) -> int | None:
        """The statement timeout of the batch: its most pressed caller's (None: the engine's own)."""
        timeouts = []
        for write in self.live:
            try:
                timeouts.append(self._timeout(write.bound))
            except StoreUnavailableError:
                timeouts.append(1)  # its deadline is past: it ends the batch at once, then runs alone
        return min((t for t in timeouts if t is not None), default=None)

    def check_callers(self) -> None:
        """Before COMMIT: raises :class:`CallersLeft` (the driver rolls back) when a caller is gone."""
        gone: list[Waiting] = [write for write in self.live if write.gone()]
        if gone:
            raise CallersLeft(gone)

    def succeeded(self, outcomes: list[WriteOutcome]) -> None:
        for write, outcome in zip(self.live, outcomes, strict=True):
            write.finish(outcome)
        self.live = []

    def failed(self, error: Exception) -> None:
        """What each caller hears of ``error``; the batch is redone where callers left (:attr:`live` not empty)."""
        live, self.live = self.live, []
        if isinstance(error, CallersLeft):
            for write in error.gone:
                write.finish(StoreUnavailableError(GONE))
            self.live = [write for write in live if write not in error.gone]
        elif isinstance(error, OffsetStoreError):
            alone = (len(live) > 1 and one_requests_fault(error)) or (
                self.lock_timeout_ms is not None and lock_wait_ran_out(error)
            )
            for write in live:
                write.finish(ALONE if alone else error)
        elif len(live) == 1:
            raise error
        else:
            log.warning("write batch failed; its requests run alone", extra={"error": type(error).__name__})
            for write in live:
                write.finish(ALONE)


def crashed(batch: list[W], error: BaseException) -> None:
    """A flusher failed outside the rules above: no caller may wait forever."""
    log.exception("write batch crashed")
    for write in batch:
        write.finish(error)


def outcome(handed: Handed) -> WriteOutcome:
    """What the caller's call returns (or raises) of what it was handed, :data:`ALONE` already run."""
    if isinstance(handed, BaseException):
        raise handed
    assert not isinstance(handed, _Alone)
    return handed
