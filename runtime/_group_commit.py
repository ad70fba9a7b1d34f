"""The rules of group commit, without I/O: what goes into a batch, its timeout, and who hears what.

Concurrent commits and joins share one transaction, one statement and one WAL flush.
Callers queue a validated request and wait; each flusher takes everything queued
whenever it is free, so while one batch is in the database the next one gathers
(PostgreSQL's own group-commit idea; no timer, no fixed wait). Batches are formed fairly
between principals (:class:`FairQueue`): one tenant's wide commits fill neither every
flusher nor another tenant's batch, and with one principal the queue is first come, first
served. Each request keeps its
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

    flush = Flush(waiting(queue.take()), timeout_ms, BATCH_LOCK_TIMEOUT_MS)
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
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from offsetstore.core.errors import OffsetStoreError, StoreUnavailableError
from offsetstore.runtime._calls import Bound, lock_wait_ran_out, one_requests_fault
from offsetstore.storage.writes import WriteOutcome, WriteRequest

log = logging.getLogger(__name__)

#: Up to this much goes into one batch; a larger request is a batch of its own.
MAX_BATCH_REQUESTS = 512
MAX_BATCH_OFFSETS = 10_000

#: A request of at least this many offsets is wide: it shares a batch with no other principal's.
WIDE_REQUEST = 100
#: Batches in the database of this many offsets each (on average) are wide: a call of a
#: principal with none of them waits behind them for no flusher (:meth:`FairQueue.urgent`).
WIDE_BATCH = 1000
#: A principal counts as active this long after it queued its last request: a client
#: between two calls keeps its share of the flushers.
ACTIVE_SECONDS = 0.5

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

    __slots__ = ("request", "bound", "principal")

    def __init__(self, request: WriteRequest, bound: Bound | None, principal: str = "") -> None:
        self.request = request
        self.bound = bound
        #: Whose call it is (:func:`~offsetstore.runtime._calls.caller_principal`): its share of the batches.
        self.principal = principal

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


class FairQueue(Generic[W]):
    """The requests waiting for a batch, one queue per principal; :meth:`take` forms each batch by shares.

    - **Shares of the flushers**: while several principals are active (a request queued
      in the last :data:`ACTIVE_SECONDS`, or a batch in the database), a principal's
      requests are in at most ``max(1, flushers // active)`` batches in the database at
      once; the others' requests are taken meanwhile, and a flusher with nothing it may
      take waits for the next request or batch back. Alone, a principal has them all.
    - **Shares of a batch**: principals take turns, a request each (round robin, the first
      turn rotating from batch to batch), up to the batch's request and offset limits. A
      wide request (:data:`WIDE_REQUEST` offsets or more) goes in a batch of its own
      principal's requests only: a one-partition commit never waits in the database
      behind another tenant's thousands.

    With one principal (every caller without one is the principal ``""``) this is the
    arrival order, as before: the gather rule's batches are unchanged.
    """

    def __init__(self, flushers: int) -> None:
        self.flushers = flushers
        self._queues: dict[str, deque[W]] = {}  # principals with requests queued, in turn order
        self._count = 0
        self._in_db: dict[str, int] = {}  # principal -> its batches in the database
        self._batches = 0
        self._offsets_in_db = 0
        self._seen: dict[str, float] = {}  # principal -> when it last queued a request

    def __len__(self) -> int:
        return self._count

    def append(self, write: W) -> None:
        queue = self._queues.get(write.principal)
        if queue is None:
            queue = self._queues[write.principal] = deque()
        queue.append(write)
        self._count += 1
        self._seen[write.principal] = time.monotonic()

    def urgent(self) -> bool:
        """A principal with no batch in the database waits while those there are wide: take it now.

        The gather rule waits for a batch to come back when few calls are queued; behind a
        batch of thousands of offsets that wait is the other tenants' latency.
        """
        return (
            self._batches > 0
            and self._offsets_in_db >= WIDE_BATCH * self._batches
            and any(p not in self._in_db for p in self._queues)
        )

    def take(self) -> list[W]:
        """The next batch (see the class docstring); empty when every principal queued has its share in use."""
        share = self._share()
        turns = [p for p in self._queues if self._in_db.get(p, 0) < share]
        if not turns:
            return []
        if len(turns) == 1 or _offsets(self._queues[turns[0]][0]) >= WIDE_REQUEST:
            turns, narrow = turns[:1], False  # one principal's requests, in their order
        else:
            narrow = True  # several principals' narrow requests, a request each in turn
        batch: list[W] = []
        offsets = 0
        while turns:
            for principal in list(turns):
                queue = self._queues[principal]
                if not queue or (narrow and _offsets(queue[0]) >= WIDE_REQUEST):
                    turns.remove(principal)  # its wide request waits for a batch of its own
                    continue
                size = _offsets(queue[0])
                if batch and (offsets + size > MAX_BATCH_OFFSETS or len(batch) >= MAX_BATCH_REQUESTS):
                    turns = []
                    break
                batch.append(queue.popleft())
                offsets += size
        self._count -= len(batch)
        for principal in _principals(batch):
            self._in_db[principal] = self._in_db.get(principal, 0) + 1
            queue = self._queues.pop(principal)
            if queue:
                self._queues[principal] = queue  # to the end of the turns
        self._batches += 1
        self._offsets_in_db += offsets
        return batch

    def returned(self, batch: list[W]) -> None:
        """``batch`` (as :meth:`take` formed it) is out of the database."""
        for principal in _principals(batch):
            left = self._in_db[principal] - 1
            if left:
                self._in_db[principal] = left
            else:
                del self._in_db[principal]
        self._batches -= 1
        self._offsets_in_db -= sum(_offsets(write) for write in batch)

    def _share(self) -> int:
        now = time.monotonic()
        if len(self._seen) > 1:
            self._seen = {p: t for p, t in self._seen.items() if now - t < ACTIVE_SECONDS}
        active = len(self._seen.keys() | self._queues.keys() | self._in_db.keys())
        return self.flushers if active <= 1 else max(1, self.flushers // active)


def _principals(batch: Iterable[Waiting]) -> list[str]:
    return list(dict.fromkeys(write.principal for write in batch))


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
