"""The store's sync face: :class:`~offsetstore.runtime.async_store.AsyncStore`'s operations, for callers in threads.

There is one runtime store, the asyncio one. :class:`Store` owns it and the event loop it
runs on (a thread of its own, ``offsetstore-db``): each method submits the async store's
coroutine to that loop and waits for it, in the caller's context, so a caller's
:func:`deadline` bounds the work as it does on the server. The server (``server/app.py``)
serves on the same loop and awaits the same object, so a process has one set of pools,
one group-commit queue and one health probe, whoever calls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Engine

from offsetstore.runtime.async_store import AsyncStore, AsyncWriteBatcher, StoreObserver
from offsetstore.storage._calls import deadline
from offsetstore.storage.status import StatusRules

# ``deadline`` too: the server and the tests bound their calls with it from here.
__all__ = ["Store", "StoreObserver", "deadline"]

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
    """The :class:`AsyncStore` on ``engine``'s database, with the loop it runs on, for callers in threads.

    The arguments are the async store's. Calling a method from the store's own loop is a
    bug (it would wait for itself): it raises ``RuntimeError``; code on the loop awaits :attr:`aio`.
    """

    def __init__(self, engine: Engine, **options: Any) -> None:
        #: The engine the store was made from: its URL and settings; the maintenance's own sessions.
        self.engine = engine
        #: The runtime store (``options`` are its own); await it on :attr:`loop`.
        self.aio = AsyncStore(engine, **options)
        #: The event loop the store runs on; the server serves on it too.
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="offsetstore-db", daemon=True)
        self._thread.start()
        self.wait(self.aio.open())

    def wait(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Runs ``coroutine`` on the store's loop, in the caller's context (its deadline), and waits for it."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a Store method called on the store's own loop: await store.aio instead")
        # The loop's callback, hence the task, runs in a copy of this thread's context.
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

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
        self, *, operation: Callable[[str, float], None] | None = None, expired: Callable[[int], None] | None = None
    ) -> None:
        self.aio.observe_with(operation=operation, expired=expired)

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
    expire_groups = _waited(AsyncStore.expire_groups)

    def dispose(self) -> None:
        """Writes what is queued, closes every connection and ends the loop; the engine's too."""
        if not self.loop.is_closed():
            self.wait(self.aio.close())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()
        self.engine.dispose()
