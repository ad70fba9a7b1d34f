"""An event loop run by a thread of its own, for programs whose own thread runs none (tests, tools).

A serving process runs its loop itself (``asyncio.run``); a test or a command-line tool that
wants the runtime store from plain threads starts one of these, opens the store on it, and
reaches it through :class:`~offsetstore.runtime.store.Store`, the sync portal.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from offsetstore.runtime import event_loop

__all__ = ["LoopThread"]

R = TypeVar("R")


class LoopThread:
    """A running event loop on a daemon thread; :meth:`run` waits for a coroutine on it, :meth:`close` ends it."""

    def __init__(self, name: str = "offsetstore-loop") -> None:
        self.loop = event_loop.new_loop()  # the serving processes' kind (OFFSETSTORE_EVENT_LOOP)
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Runs ``coroutine`` on the loop, in the caller's context (its deadline), and waits for it."""
        return run_on(self.loop, coroutine)

    def close(self) -> None:
        """Stops the loop and its thread (what runs on it should be closed first)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_on(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, R]) -> R:
    """Runs ``coroutine`` on ``loop`` (another thread's) and waits; raises ``RuntimeError`` on that loop itself."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("a blocking call on the loop it waits for: await the coroutine instead (await store.aio)")
    # The loop's callback, hence the task, runs in a copy of this thread's context.
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
