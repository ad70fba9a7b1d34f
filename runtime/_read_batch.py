"""Coalesced reads: concurrent FetchOffsets or DescribeGroup calls of different groups ride one statement.

Each caller's read is the storage core's steps (:func:`storage.fetch_offsets_steps`,
:func:`storage.describe_group_steps`); its first statement is a page of one group's rows. A
:class:`ReadKind` is such a first statement that reads may share: FetchOffsets' page
(:data:`FETCH`), DescribeGroup's under the store's status window, without or with lag
history (:func:`describe_kinds`). Readers queue that statement's parameters and wait; each
flusher task takes the reads queued of the kind at the head of the queue whenever it is
free, so the next batch gathers while one is in the database (no timer; the queue and the
tasks: :mod:`._flushers`, as the group commit's). A batch is of one kind, and the other
kinds' reads keep their places, so no more statements are in the database at once than
there are tasks. A lone read is one statement and one round trip, as before; a batch of n is
one statement too: the kind's batched statement runs the very page query once per group,
side by side (``LEFT JOIN LATERAL`` over the groups' parameters, storage/batched_pages.py), in one
snapshot. Each caller then goes on with its own steps and its own rows (a page token's
generation checked, the result built) in its own task: bad input of one caller fails that
caller alone. What its steps ask for next, the batch answers where it can (FetchOffsets'
generation for a page without rows); otherwise the read goes on alone on the hot path
(DescribeGroup's lag histories, its group verdict over more than one page). Reads are read
committed: each statement sees its own snapshot anyway, so a statement on another
connection answers what the read alone would have.

The rules, so that a coalesced read answers exactly what the read alone would have:

- a caller waits no longer than its read alone would have run (its deadline, or the
  statement timeout), then hears the same UNAVAILABLE; a caller whose call is cancelled is
  dropped from a batch not yet sent, and its result is dropped from one already sent;
- the batch's statement is bounded by its least pressed caller's time;
- a batch of one that fails fails its caller as the read alone would (the same typed
  error); a batch of more that fails, for any reason, sends each caller back to run its
  read alone, so that each hears its own outcome.

Reads with a topic selection (their statement carries arrays of their own) run alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from offsetstore import storage
from offsetstore.core.errors import StoreUnavailableError
from offsetstore.runtime._calls import Bound, caller_bound
from offsetstore.runtime._flushers import Fifo, Flushers
from offsetstore.storage import describe, reads
from offsetstore.storage.batched_pages import batch_params
from offsetstore.storage.reads import BATCHED_FETCH

__all__ = [
    "BATCHED_FETCH",
    "FETCH",
    "MAX_BATCH_READS",
    "ReadBatcher",
    "ReadKind",
    "Rows",
    "describe_kinds",
    "resumed",
]

R = TypeVar("R")

log = logging.getLogger(__name__)

#: Up to this many reads ride one statement (below :data:`storage.steps.WIDE`: the statement stays prepared).
MAX_BATCH_READS = 128

#: A statement's rows.
Rows = list[tuple[Any, ...]]
#: A caller's share of a batch: the rows of its first statement, and the statements its steps
#: may ask for next that the batch answers too (their SQL, known by identity, with their rows).
Share = tuple[Rows, tuple[tuple[str, Rows], ...]]


@dataclass(frozen=True, eq=False)
class ReadKind:
    """A first statement that concurrent reads of different groups may share, and how they share it."""

    #: The operation's name: its metrics and log lines, and how the batch's failures are typed.
    name: str
    #: The first statement's SQL, the very string the reads' steps yield (known by identity).
    first: str
    #: The batch's statement (:func:`batched`).
    batched: str
    #: The batch's parameters that are the same for every group.
    fixed: Mapping[str, object]
    #: ``split(rows, count)``: the batch's rows as the shares of its ``count`` callers, in order.
    split: Callable[[Rows, int], list[Share]]


def _split_fetch(rows: Rows, count: int) -> list[Share]:
    shares: list[Share] = [([], ()) for _ in range(count)]
    for n, generation, *row in rows:
        if row[1] is None:  # no page rows: the group's generation, for the caller's steps to ask for
            shares[n - 1] = ([], ((reads.FETCH_GENERATION, [(generation,)]),))
        else:
            shares[n - 1][0].append(tuple(row))
    return shares


#: FetchOffsets of all of a group's topics.
FETCH = ReadKind("fetch_offsets", reads.FETCH_PAGE, BATCHED_FETCH, {}, _split_fetch)


def _split_describe(rows: Rows, count: int) -> list[Share]:
    shares: list[Share] = [([], ()) for _ in range(count)]
    for n, *row in rows:
        if row[0] is not None:  # a group not found has no generation: no rows, as its page alone has
            shares[n - 1][0].append(tuple(row))
    return shares


def describe_kinds(window: float) -> tuple[ReadKind, ...]:
    """DescribeGroup's page under the status ``window``, without and with lag history: a kind each.

    Their SQL is the same text; their fixed parameters (a page entry's size) are not. The
    storage core keeps each compiled page query (16 of them at most): a store whose window's
    was dropped from that cache meanwhile would describe alone, as before, never wrongly.
    """
    kinds = []
    for lag_history in (False, True):
        first, many, fixed = describe.batched_page_statement(window, lag_history)
        kinds.append(ReadKind("describe_group", first, many, fixed, _split_describe))
    return tuple(kinds)


class _Alone:
    def __repr__(self) -> str:
        return "ALONE"


#: Handed to a caller whose batch failed: it runs its read alone.
ALONE = _Alone()


class _Read:
    __slots__ = ("kind", "params", "bound", "future")

    def __init__(self, kind: ReadKind, params: Mapping[str, object], bound: Bound | None) -> None:
        self.kind = kind
        self.params = params
        self.bound = bound
        self.future: asyncio.Future[Share | _Alone | BaseException] = asyncio.get_running_loop().create_future()

    def gone(self) -> bool:
        bound = self.bound
        return self.future.done() or (bound is not None and (bound[0] <= time.monotonic() or not bound[1]()))

    def finish(self, handed: Share | _Alone | BaseException) -> None:
        if not self.future.done():
            self.future.set_result(handed)


#: Runs a batch's statement: ``execute(name, sql, params, timeout_ms)`` -> rows, its failures typed as ``name``'s.
Execute = Callable[[str, str, Mapping[str, object], "int | None"], Awaitable[Rows]]


class ReadBatcher:
    """``flushers`` tasks that take the queued reads, each batch one statement (rules: the module's docstring).

    ``timeout_ms(bound)`` is the store's: the statement timeout a caller's bound asks for
    (None: ``statement_timeout_ms``, the engine's; it raises where the deadline is past).
    ``kinds``: the first statements it coalesces.
    """

    def __init__(
        self,
        execute: Execute,
        timeout_ms: Callable[[Bound | None], int | None],
        statement_timeout_ms: int,
        *,
        kinds: tuple[ReadKind, ...] = (FETCH,),
        flushers: int = 2,
        observe: Callable[[int], None] | None = None,
    ) -> None:
        if flushers < 1:
            raise ValueError("read_flushers must be >= 1")
        self._execute = execute
        self._timeout_ms = timeout_ms
        self._statement_ms = statement_timeout_ms
        # By the identity of their SQL (each kind holds its string: the id stays its own).
        self._kinds = {id(kind.first): kind for kind in kinds}
        if len(self._kinds) != len(kinds):  # two kinds of one string object: one would take the other's reads
            raise ValueError("each read kind needs a first statement of its own (the same text is fine)")
        self._flushers: Flushers[_Read] = Flushers("offsetstore-reads", flushers, Fifo(_take), self._flush, observe)

    @property
    def flushers(self) -> int:
        """How many batches may be in the database at once."""
        return self._flushers.count

    def queued(self) -> int:
        """How many reads wait for a flusher (not yet in a batch)."""
        return len(self._flushers)

    def kind_of(self, statement: storage.Statement | None) -> ReadKind | None:
        """The kind of a read whose steps' first statement is ``statement``; None: it runs alone."""
        if statement is None:
            return None
        kind = self._kinds.get(id(statement[0]))
        return kind if kind is not None and kind.first is statement[0] else None

    async def run(
        self,
        make: Callable[[], storage.HotSteps[R]],
        hot: Callable[[Callable[[], storage.HotSteps[R]]], Awaitable[R]],
    ) -> R:
        """The result of the read ``make()`` (the storage core's steps), its first statement riding a batch if it may.

        ``hot(steps)`` runs a read by itself on the hot path, in the store's attempts, each
        attempt on the steps ``steps()`` gives: the first attempt, the steps begun already (a
        read that rides no batch; one that asks, after its share of the batch, for a statement
        the batch does not answer); a retried attempt, or a read whose batch failed, the read
        afresh. Bad input raises before any statement.
        """
        steps = make()
        statement = next(steps)  # bad input raises here, before a connection
        kind = self.kind_of(statement)
        first = [] if kind is not None else [resumed(statement, steps)]

        def once() -> storage.HotSteps[R]:
            return first.pop() if first else make()

        if kind is None:
            return await hot(once)
        assert statement is not None
        bound = caller_bound()
        ms = self._timeout_ms(bound)  # a deadline already past never reaches the database
        ms = self._statement_ms if ms is None else ms
        read = _Read(kind, statement[1], bound)
        self._flushers.put(read)
        try:
            # As the read alone is bounded: cancelled (here: left behind) when its time is up.
            async with asyncio.timeout(ms / 1000 if ms else None):
                handed = await read.future  # a cancelled call cancels its future: the flusher drops it
        except TimeoutError:
            log.warning("database unavailable (read timed out)", extra={"ms": ms})
            raise StoreUnavailableError("the offset store's database did not answer in time") from None
        if handed is ALONE:
            return await hot(once)
        if isinstance(handed, BaseException):
            raise handed
        assert not isinstance(handed, _Alone)
        rows, answers = handed
        try:
            following = steps.send(rows)
            while True:
                if following is storage.PAUSE:
                    await asyncio.sleep(0)  # as on the hot path: other calls run between slices
                    following = steps.send(None)
                    continue
                answered = next((found for sql, found in answers if sql is following[0]), None)
                if answered is None:
                    break
                following = steps.send(answered)
        except StopIteration as done:
            result: R = done.value
            return result
        first.append(resumed(following, steps))
        return await hot(once)

    async def stop(self) -> None:
        """Answers what is queued, then ends the flushers."""
        await self._flushers.stop()

    async def _flush(self, batch: list[_Read]) -> None:
        try:
            kind = batch[0].kind
            ms = self._batch_ms(batch)
            params = {**kind.fixed, **batch_params([read.params for read in batch])}
            try:
                rows = await self._execute(kind.name, kind.batched, params, ms)
            except Exception as error:
                if len(batch) == 1:
                    batch[0].finish(error)
                else:
                    log.info("read batch failed; its reads run alone", extra={"error": type(error).__name__})
                    for read in batch:
                        read.finish(ALONE)
                return
            for read, share in zip(batch, kind.split(rows, len(batch)), strict=True):
                read.finish(share)
        except BaseException as error:  # no caller may wait forever
            for read in batch:
                read.finish(error if isinstance(error, Exception) else StoreUnavailableError("read batch stopped"))
            if not isinstance(error, Exception):
                raise

    def _batch_ms(self, batch: list[_Read]) -> int | None:
        """The batch's bound: its least pressed caller's (None: the engine's statement timeout)."""
        most = 0
        for read in batch:
            try:
                ms = self._timeout_ms(read.bound)
            except StoreUnavailableError:
                continue  # its deadline just passed: its own wait answers it
            if ms is None:
                return None
            most = max(most, ms)
        return most or None


def _take(queue: deque[_Read]) -> list[_Read]:
    """The next batch off ``queue``: up to :data:`MAX_BATCH_READS` reads of the first one's kind.

    The others keep their places in the queue; those gone are answered, not sent.
    """
    batch: list[_Read] = []
    others: list[_Read] = []
    while queue and len(batch) < MAX_BATCH_READS:
        read = queue.popleft()
        if read.gone():  # cancelled, or past its deadline: not sent
            read.finish(StoreUnavailableError("the caller went away before the database answered"))
        elif not batch or read.kind is batch[0].kind:
            batch.append(read)
        else:
            others.append(read)
    queue.extendleft(reversed(others))
    return batch


def resumed(statement: storage.Statement | None, steps: storage.HotSteps[R]) -> storage.HotSteps[R]:
    """``steps`` whose ``statement`` is taken already (their first, or the one a batch left), as steps again."""
    while True:
        rows = yield statement
        try:
            statement = steps.send(rows)
        except StopIteration as done:
            result: R = done.value
            return result
