"""The store's sync face: a portal onto :class:`~offsetstore.runtime.async_store.AsyncStore`, for callers in threads.

There is one runtime store, the asyncio one, and whoever runs the program owns its loop: a
serving process runs it with ``asyncio.run`` and awaits the store; its threads (the metrics'
scrapes, the Kafka watermark reader) reach the same store through :class:`Store`, whose
methods submit the async store's coroutines to that loop and wait, in the caller's context,
so a caller's :func:`deadline` bounds the work as it does on the server. A test or a tool
that runs no loop of its own opens one with :meth:`Store.open` (a
:class:`~offsetstore.runtime.loop_thread.LoopThread` and the store on it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from offsetstore.runtime._calls import deadline
from offsetstore.runtime.async_store import AsyncStore, AsyncWriteBatcher
from offsetstore.runtime.config import StoreConfig, StoreObserver
from offsetstore.runtime.loop_thread import LoopThread, run_on
from offsetstore.storage.status import StatusRules

# ``deadline`` too: the server and the tests bound their calls with it from here.
__all__ = ["Store", "StoreConfig", "StoreObserver", "deadline"]

P = ParamSpec("P")
R = TypeVar("R")


def _waited(method: Callable[Concatenate[AsyncStore, P], Coroutine[Any, Any, R]]) -> Callable[Concatenate[Store, P], R]:
    """``method`` of the async store as a blocking method of :class:`Store` (same name, arguments and docs)."""

    def call(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.wait(method(self.aio, *args, **kwargs))

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class Store:
    """A portal onto ``aio``, which runs on ``loop`` (another thread's), for callers in threads.

    Calling a method from ``loop`` itself is a bug (it would wait for itself): it raises
    ``RuntimeError``; code on the loop awaits :attr:`aio`.
    """

    def __init__(self, aio: AsyncStore, loop: asyncio.AbstractEventLoop) -> None:
        #: The runtime store; await it on :attr:`loop`.
        self.aio = aio
        #: The event loop the store runs on, someone else's.
        self.loop = loop
        self._owned: LoopThread | None = None

    @classmethod
    def open(cls, config: StoreConfig) -> Store:
        """The store of ``config``, opened on a :class:`LoopThread` of its own; :meth:`dispose` closes both.

        For tests and tools that run no loop; a serving process opens the :class:`AsyncStore` on its own.
        """
        thread = LoopThread("offsetstore-db")
        aio = AsyncStore(config)
        try:
            thread.run(aio.open())
        except BaseException:
            thread.close()
            raise
        store = cls(aio, thread.loop)
        store._owned = thread
        return store

    def wait(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Runs ``coroutine`` on the store's loop, in the caller's context (its deadline), and waits for it."""
        return run_on(self.loop, coroutine)

    @property
    def config(self) -> StoreConfig:
        return self.aio.config

    # Settings and hooks live on the runtime store.
    @property
    def statement_timeout_ms(self) -> int:
        return self.aio.statement_timeout_ms

    @property
    def max_response_bytes(self) -> int:
        return self.aio.max_response_bytes

    @property
    def status_rules(self) -> StatusRules:
        return self.aio.status_rules

    @property
    def pool_size(self) -> int:
        return self.aio.pool_size

    @property
    def write_flushers(self) -> int:
        return self.aio.write_flushers

    @property
    def writes(self) -> AsyncWriteBatcher:
        return self.aio.writes

    @property
    def observer(self) -> StoreObserver:
        return self.aio.observer

    def observe_with(
        self,
        *,
        operation: Callable[[str, float], None] | None = None,
        expired: Callable[[int], None] | None = None,
        batch: Callable[[str, int], None] | None = None,
    ) -> None:
        self.aio.observe_with(operation=operation, expired=expired, batch=batch)

    def pool_in_use(self) -> int:
        return self.aio.pool_in_use()

    def run(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs ``operation(conn, *args, **kwargs)`` of the storage core in a transaction of its own."""
        return self.wait(self.aio.run(operation, *args, **kwargs))

    def read(self, operation: Callable[..., R], *args: object, **kwargs: object) -> R:
        """Runs a read of the storage core in a transaction of its own."""
        return self.wait(self.aio.read(operation, *args, **kwargs))

    ping = _waited(AsyncStore.ping)
    token_key = _waited(AsyncStore.token_key)
    commit_offsets = _waited(AsyncStore.commit_offsets)
    join_group = _waited(AsyncStore.join_group)
    fetch_offsets = _waited(AsyncStore.fetch_offsets)
    describe_group = _waited(AsyncStore.describe_group)
    reset_offsets = _waited(AsyncStore.reset_offsets)
    delete_offsets = _waited(AsyncStore.delete_offsets)
    list_groups = _waited(AsyncStore.list_groups)
    list_offset_history = _waited(AsyncStore.list_offset_history)
    report_watermarks = _waited(AsyncStore.report_watermarks)
    observe_offsets = _waited(AsyncStore.observe_offsets)
    expire_groups = _waited(AsyncStore.expire_groups)

    def dispose(self) -> None:
        """Of a store :meth:`open` made: writes what is queued, closes every connection and ends its loop."""
        thread, self._owned = self._owned, None
        if thread is not None and not thread.loop.is_closed():
            try:
                thread.run(self.aio.close())
            finally:
                thread.close()
