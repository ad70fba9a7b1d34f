"""The serving processes' event loop: uvloop by default, asyncio's own with ``--event-loop asyncio``.

uvloop (the server extra brings it) runs grpc.aio, psycopg's async connections and aiohttp
unchanged, for less CPU per call (docs/performance.md, "The event loop"). Where it is not
installed (the platforms it does not build on), the supervisor says so once and every process
serves on asyncio's own loop. Code that waits on a timer must trust the timer, not the clock:
uvloop's fire by libuv's millisecond clock, read at the loop turn's start, so
``time.monotonic()`` may still be a little short of the time asked for when one fires.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["EVENT_LOOPS", "new_loop", "resolve", "run", "running"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``--event-loop``'s choices.
EVENT_LOOPS = ("uvloop", "asyncio")


def _available(choice: str) -> str:
    """``choice``, or asyncio where it is uvloop and uvloop is not installed."""
    return "asyncio" if choice == "uvloop" and importlib.util.find_spec("uvloop") is None else choice


def resolve(choice: str) -> str:
    """The loop a server will run for ``choice``: as asked, but asyncio's own where uvloop is not installed (said once, here)."""
    available = _available(choice)
    if available != choice:
        log.warning("uvloop is not installed here: serving on asyncio's own event loop (--event-loop asyncio)")
    return available


def _factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if choice == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None  # asyncio.Runner's default: asyncio's own loop


def new_loop(choice: str | None = None) -> asyncio.AbstractEventLoop:
    """A new event loop for a thread of one's own, of the kind a server would serve on.

    ``choice`` by default is what ``OFFSETSTORE_EVENT_LOOP`` names (uvloop unset), so the tests'
    and tools' in-process stores run on the serving processes' loop; asyncio's own where uvloop
    is not installed.
    """
    choice = choice or os.environ.get("OFFSETSTORE_EVENT_LOOP") or "uvloop"
    if choice not in EVENT_LOOPS:
        raise ValueError("OFFSETSTORE_EVENT_LOOP must be uvloop or asyncio")
    factory = _factory(_available(choice))
    return factory() if factory is not None else asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """``asyncio.run(main)`` on the loop ``choice`` names (one of :data:`EVENT_LOOPS`, as :func:`resolve` left it)."""
    with asyncio.Runner(loop_factory=_factory(choice)) as runner:
        return runner.run(main)


def running() -> str:
    """The running loop's kind, as the logs say it: ``uvloop`` or ``asyncio``."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
