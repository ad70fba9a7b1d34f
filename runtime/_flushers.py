"""The queue and the flusher tasks that the read and write batchers share (:mod:`._read_batch`, :mod:`._write_batcher`).

Callers :meth:`Flushers.put` what they wait for; ``count`` tasks, started at the first put,
each take a batch off the queue (its :meth:`Queue.take`) whenever it is free and hand it to ``flush``, so
the next batch gathers while one is in the database (no timer). A free task takes at once
while no other is in the database (an idle server adds no wait); while another is, it waits
until more calls are queued than that batch holds, or for that one to come back, whichever is
first: taken at once, the first call to arrive went alone (at 64 clients, 40% of the batches
held one call) while the next batch waited for everything else. "More than the batch in the
database" lets batches grow until they take a round trip to gather; a rule on the recent
batches' sizes (half their mean, tried first) took a second call at once behind a batch of
one, and some runs stayed at batches of one or two (a third of them single calls). The queue
may say a call is :meth:`~Queue.urgent` (the write queue: a principal's call behind another's
wide batch), and a free task then takes at once; and it may hold its calls back (take nothing:
the write queue's shares), a free task then waits for the next call or batch back. The tasks
run in a context of their own, not the first caller's (its deadline, its trace), for good.
What a batch does, and how each caller hears its outcome, is the batcher's: ``flush`` must
answer every caller of its batch, whatever happens.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from offsetstore.core.errors import StoreUnavailableError

__all__ = ["Fifo", "Flushers", "Queue"]

T = TypeVar("T")


class Queue(Protocol[T]):
    """What the tasks take batches from: :meth:`take` is called only while it is not empty."""

    def append(self, item: T) -> None: ...

    def __len__(self) -> int: ...

    def take(self) -> list[T]:
        """The next batch; may be empty (it answered what it dropped, or holds the rest back for now)."""
        ...

    def urgent(self) -> bool:
        """Whether a free task should take at once, whatever the gather rule says."""
        ...

    def returned(self, batch: list[T]) -> None:
        """``batch``, taken by :meth:`take`, is out of the database."""
        ...


class Fifo(Generic[T]):
    """A :class:`Queue` in arrival order, batches taken off its head by ``take``."""

    def __init__(self, take: Callable[[deque[T]], list[T]]) -> None:
        self.items: deque[T] = deque()
        self._take = take

    def append(self, item: T) -> None:
        self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)

    def take(self) -> list[T]:
        return self._take(self.items)

    def urgent(self) -> bool:
        return False

    def returned(self, batch: list[T]) -> None:
        pass


class Flushers(Generic[T]):
    """``count`` tasks named ``name-<n>`` taking batches of ``T`` off ``queue`` (see the module's docstring).

    ``observe``, if given, is told each batch's size before it is flushed (the metrics).
    """

    def __init__(
        self,
        name: str,
        count: int,
        queue: Queue[T],
        flush: Callable[[list[T]], Awaitable[None]],
        observe: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.count = count
        self._flush = flush
        self._observe = observe
        self._queue = queue
        self._held_back = False  # the queue took nothing while calls were queued: wait for news
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self._busy = 0  # tasks whose batch is in the database
        self._in_db = 0  # the calls of the batches in the database

    def __len__(self) -> int:
        """How many are queued, not yet taken."""
        return len(self._queue)

    def put(self, item: T) -> None:
        """Queues ``item`` for the next batch (starting the tasks at the first); refused once stopped."""
        if self._stopped:
            raise StoreUnavailableError("the offset store is shutting down")
        if self._wake is None:
            self._wake = asyncio.Event()
            self._tasks = [
                asyncio.create_task(self._loop(), name=f"{self.name}-{n}", context=contextvars.Context())
                for n in range(self.count)
            ]
        self._queue.append(item)
        self._held_back = False
        self._wake.set()

    async def stop(self) -> None:
        """Flushes what is queued, then ends the tasks."""
        self._stopped = True
        if self._wake is not None:
            self._wake.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _ready(self) -> bool:
        """Whether a free task takes a batch now (the module's docstring says when)."""
        return (
            bool(self._queue)
            and not self._held_back
            and (
                self._busy == 0 or self._stopped or len(self._queue) > self._in_db / self._busy or self._queue.urgent()
            )
        )

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            while not self._ready():
                if self._stopped and not self._queue:
                    self._wake.set()  # the other tasks end too
                    return
                self._wake.clear()
                await self._wake.wait()
            batch = self._queue.take()
            if not batch and self._queue and self._busy:
                self._held_back = True  # held back until a batch comes back (or a call comes)
                continue
            if self._queue:
                self._wake.set()  # more than one batch's worth: another task may take it
            if batch:
                if self._observe is not None:
                    self._observe(len(batch))
                self._busy += 1
                self._in_db += len(batch)
                try:
                    await self._flush(batch)
                finally:
                    self._busy -= 1
                    self._in_db -= len(batch)
                    self._queue.returned(batch)
                    self._held_back = False
                    self._wake.set()  # a task waiting for this one to come back takes what gathered
