"""The serving processes' event loop: asyncio's own by default, uvloop with ``--event-loop uvloop``.

uvloop (the server extra brings it) runs grpc.aio, psycopg's async connections and aiohttp
unchanged, for less CPU per call, but a load test of huge-group reads starves under it
(docs/performance.md, "The event loop"), so it is not the default yet. Where it is asked for and
not installed, the supervisor says so once and every process serves on asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["EVENT_LOOPS", "resolve", "run", "running"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``--event-loop``'s choices.
EVENT_LOOPS = ("uvloop", "asyncio")


def resolve(choice: str) -> str:
    """The loop a server will run for ``choice``: as asked, but asyncio's own where uvloop is not installed (said once, here)."""
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is None:
        log.warning("uvloop is not installed here: serving on asyncio's own event loop (--event-loop asyncio)")
        return "asyncio"
    return choice


def _factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if choice == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None  # asyncio.Runner's default: asyncio's own loop


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """``asyncio.run(main)`` on the loop ``choice`` names (one of :data:`EVENT_LOOPS`, as :func:`resolve` left it)."""
    with asyncio.Runner(loop_factory=_factory(choice)) as runner:
        return runner.run(main)


def running() -> str:
    """The running loop's kind, as the logs say it: ``uvloop`` or ``asyncio``."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
