"""Coalesced reads: concurrent FetchOffsets of different groups ride one statement, as commits ride one batch.

Each caller's read is the storage core's steps (:func:`storage.fetch_offsets_steps`); its
first statement is a page of one group's offsets (``reads._FETCH_ALL``). Readers queue that
statement's parameters and wait; each flusher task takes everything queued whenever it is
free, so the next batch gathers while one is in the database (no timer; the queue and the
tasks: :mod:`._flushers`, as the group commit's). A lone read is one
statement and one round trip, as before; a batch of n is one statement too:
:data:`BATCHED_FETCH` runs the very page query once per group, side by side
(``LEFT JOIN LATERAL`` over the groups' parameters), in one snapshot, and gives each group
the generation a page without rows asks for. Each caller then finishes its own steps with
its own rows (a page token's generation checked, the result built) in its own task: bad
input of one caller fails that caller alone.

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
from typing import Any

from offsetstore import storage
from offsetstore.core.errors import StoreUnavailableError
from offsetstore.core.types import FetchResult
from offsetstore.runtime._flushers import Flushers
from offsetstore.storage import reads
from offsetstore.storage._calls import Bound, caller_bound
from offsetstore.storage.steps import int_array, text_array

__all__ = ["BATCHED_FETCH", "MAX_BATCH_READS", "ReadBatcher", "coalescable"]

log = logging.getLogger(__name__)

#: Up to this many reads ride one statement (below :data:`storage.steps.WIDE`: the statement stays prepared).
MAX_BATCH_READS = 128

# The page query's parameters, each a column of the batch's rows instead.
_COLUMNS = {
    "%(group)s::VARCHAR": "b.group_id",
    "%(after_topic)s::VARCHAR": "b.after_topic",
    "%(after_partition)s::INTEGER": "b.after_partition",
    "%(rows)s::INTEGER": "b.row_limit",
    "%(budget)s::BIGINT": "b.budget",
}


def _per_group(sql: str) -> str:
    for placeholder, column in _COLUMNS.items():
        sql = sql.replace(placeholder, column)
    if "%(" in sql:  # the page query gained a parameter this module does not know
        raise AssertionError(f"unmapped parameter in the page query: {sql}")
    return sql


_GENERATION = _per_group(reads._FETCH_GENERATION)

#: The page query of :func:`storage.fetch_offsets_steps` for each group of the batch, in one statement.
#: A row: the caller's index (from 1), the generation where the group's page has no rows, the page's row.
BATCHED_FETCH = (
    "SELECT b.n, CASE WHEN f.topic IS NULL THEN (" + _GENERATION + ") END, f.* "
    "FROM unnest(%(groups)s::VARCHAR[], %(after_topics)s::VARCHAR[], %(after_partitions)s::INTEGER[], "
    "%(row_limits)s::INTEGER[], %(budgets)s::BIGINT[]) "
    "WITH ORDINALITY AS b(group_id, after_topic, after_partition, row_limit, budget, n) "
    "LEFT JOIN LATERAL (" + _per_group(reads._FETCH_ALL) + ") AS f ON true "
    "ORDER BY b.n, f.topic, f.partition"
)

#: The batch's parameters: each an array literal of one page parameter (joined at C speed, see :mod:`.steps`).
_PARAMS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("groups", "group", text_array),
    ("after_topics", "after_topic", text_array),
    ("after_partitions", "after_partition", int_array),
    ("row_limits", "rows", int_array),
    ("budgets", "budget", int_array),
)


def coalescable(statement: storage.Statement | None) -> bool:
    """Whether the first statement of a read's steps may ride a batch."""
    return statement is not None and statement[0] is reads._FETCH_ALL


class _Alone:
    def __repr__(self) -> str:
        return "ALONE"


#: Handed to a caller whose batch failed: it runs its read alone.
ALONE = _Alone()

#: A caller's share of a batch: its page's rows, and its group's generation (for a page without rows).
Share = tuple[list[tuple[Any, ...]], int]


class _Read:
    __slots__ = ("params", "bound", "future")

    def __init__(self, params: Mapping[str, object], bound: Bound | None) -> None:
        self.params = params
        self.bound = bound
        self.future: asyncio.Future[Share | _Alone | BaseException] = asyncio.get_running_loop().create_future()

    def gone(self) -> bool:
        bound = self.bound
        return self.future.done() or (bound is not None and (bound[0] <= time.monotonic() or not bound[1]()))

    def finish(self, handed: Share | _Alone | BaseException) -> None:
        if not self.future.done():
            self.future.set_result(handed)


#: Runs the batch's statement: ``execute(sql, params, timeout_ms)`` -> rows, its failures typed.
Execute = Callable[[str, Mapping[str, object], "int | None"], Awaitable[list[tuple[Any, ...]]]]


class ReadBatcher:
    """``flushers`` tasks that take the queued reads, each batch one statement (rules: the module's docstring).

    ``timeout_ms(bound)`` is the store's: the statement timeout a caller's bound asks for
    (None: ``statement_timeout_ms``, the engine's; it raises where the deadline is past).
    """

    def __init__(
        self,
        execute: Execute,
        timeout_ms: Callable[[Bound | None], int | None],
        statement_timeout_ms: int,
        *,
        flushers: int = 2,
    ) -> None:
        if flushers < 1:
            raise ValueError("read_flushers must be >= 1")
        self._execute = execute
        self._timeout_ms = timeout_ms
        self._statement_ms = statement_timeout_ms
        self._flushers: Flushers[_Read] = Flushers("offsetstore-reads", flushers, _take, self._flush)

    @property
    def flushers(self) -> int:
        """How many batches may be in the database at once."""
        return self._flushers.count

    async def fetch(
        self,
        steps: storage.HotSteps[FetchResult],
        statement: storage.Statement,
        alone: Callable[[], Awaitable[FetchResult]],
    ) -> FetchResult:
        """The result of the read ``steps`` (its first ``statement`` taken), ``statement`` riding a batch.

        ``alone()`` runs the read by itself, where its batch failed.
        """
        bound = caller_bound()
        ms = self._timeout_ms(bound)  # a deadline already past never reaches the database
        ms = self._statement_ms if ms is None else ms
        read = _Read(statement[1], bound)
        self._flushers.put(read)
        try:
            # As the read alone is bounded: cancelled (here: left behind) when its time is up.
            async with asyncio.timeout(ms / 1000 if ms else None):
                handed = await read.future  # a cancelled call cancels its future: the flusher drops it
        except TimeoutError:
            log.warning("database unavailable (read timed out)", extra={"ms": ms})
            raise StoreUnavailableError("the offset store's database did not answer in time") from None
        if handed is ALONE:
            return await alone()
        if isinstance(handed, BaseException):
            raise handed
        assert not isinstance(handed, _Alone)
        return _finish(steps, *handed)

    async def stop(self) -> None:
        """Answers what is queued, then ends the flushers."""
        await self._flushers.stop()

    async def _flush(self, batch: list[_Read]) -> None:
        try:
            ms = self._batch_ms(batch)
            params = {name: literal([read.params[key] for read in batch]) for name, key, literal in _PARAMS}
            try:
                rows = await self._execute(BATCHED_FETCH, params, ms)
            except Exception as error:
                if len(batch) == 1:
                    batch[0].finish(error)
                else:
                    log.info("read batch failed; its reads run alone", extra={"error": type(error).__name__})
                    for read in batch:
                        read.finish(ALONE)
                return
            shares: list[Share] = [([], 0) for _ in batch]
            for n, generation, *row in rows:
                if row[1] is None:  # no page rows: the group's generation, for the caller to ask for
                    shares[n - 1] = ([], generation)
                else:
                    shares[n - 1][0].append(tuple(row))
            for read, share in zip(batch, shares, strict=True):
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
    """The next batch off ``queue``: up to :data:`MAX_BATCH_READS` reads; those gone are answered, not sent."""
    batch: list[_Read] = []
    while queue and len(batch) < MAX_BATCH_READS:
        read = queue.popleft()
        if read.gone():  # cancelled, or past its deadline: not sent
            read.finish(StoreUnavailableError("the caller went away before the database answered"))
        else:
            batch.append(read)
    return batch


def _finish(steps: storage.HotSteps[FetchResult], rows: list[tuple[Any, ...]], generation: int) -> FetchResult:
    """Drives the rest of a read's ``steps`` with its share of the batch (the caller's own task)."""
    try:
        statement = steps.send(rows)
        while True:
            if statement is storage.PAUSE:
                statement = steps.send(None)
            elif statement[0] is reads._FETCH_GENERATION:
                statement = steps.send([(generation,)])
            else:  # the steps asked for a statement the batch does not answer
                raise AssertionError(f"a coalesced read asked for {statement[0]!r}")
    except StopIteration as done:
        result: FetchResult = done.value
        return result


def resumed(statement: storage.Statement | None, steps: storage.HotSteps[Any]) -> storage.HotSteps[Any]:
    """``steps`` whose first ``statement`` was already taken, as steps again (to run alone)."""
    while True:
        rows = yield statement
        try:
            statement = steps.send(rows)
        except StopIteration as done:
            return done.value
