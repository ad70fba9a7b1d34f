"""The request, read within a bound, its partitions counted on the wire, then decoded: what every later policy reads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from types import MappingProxyType

from google.protobuf.message import DecodeError, Message

from offsetstore.core.calls import SERVICE
from offsetstore.core.errors import DeadlineExceededError, InvalidArgumentError
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next
from offsetstore.server.wire import check_entries
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = ["REQUEST_CLASSES", "Read", "make"]

#: Each method's request message class, by method name.
REQUEST_CLASSES: Mapping[str, type[Message]] = MappingProxyType(
    {m.name: getattr(pb, m.input_type.name) for m in SERVICE.methods}
)


class Read:
    """Reads the call's request within ``seconds`` of its start (DEADLINE_EXCEEDED past it), checks and decodes it.

    Only now is a byte of the request read: the caller is known, counted in and may make
    such calls. Counted before it is decoded, every costly field (:mod:`offsetstore.server.wire`):
    20 million empty entries decode into gigabytes.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._bound = _ReadBound(seconds)

    async def __call__(self, call: Call, next: Next) -> Message:
        method = call.method
        transport = call.transport
        assert transport is not None, "a call made by a transport adapter"
        try:
            data = await self._bound.first(transport.message())
        except TimeoutError:
            raise DeadlineExceededError(
                f"the {method} request did not arrive within {self.seconds:g} s of the call's start"
            ) from None
        if data is None:
            raise InvalidArgumentError(f"the call carries no {method} request message")
        request_class = REQUEST_CLASSES[method]
        carried = check_entries(request_class.DESCRIPTOR, data, method)  # type: ignore[arg-type]  # upb's Descriptor, the same API
        try:
            call.request = request_class.FromString(data)
        except (DecodeError, RuntimeError, ValueError):
            raise InvalidArgumentError(f"the request does not decode as a {method} request message") from None
        call.carried = carried
        return await next(call)


class _ReadBound:
    """Ends the request reads that run past ``seconds``, with one timer for all the calls reading.

    A timer per call (``asyncio.timeout``) set and cancelled a timer handle each time: ~4 µs,
    ~6% of a bare gated call's server CPU on uvloop (bench/gate_shape.py, ``stream-untimed``);
    here a call costs a dict entry. While reads are pending, a sweep every ``seconds / 8``
    cancels those past the bound, so a stalled read ends between ``seconds`` and
    ``1.125 × seconds`` after it began, as TimeoutError.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._reading: dict[asyncio.Task[object], float] = {}  # the task reading -> when it began
        self._ended: set[asyncio.Task[object]] = set()  # cancelled by a sweep, not yet told
        self._sweep: asyncio.TimerHandle | None = None

    async def first(self, message: Awaitable[bytes | None]) -> bytes | None:
        """``message`` awaited; TimeoutError past the bound."""
        task = asyncio.current_task()
        assert task is not None
        self._reading[task] = time.monotonic()
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.seconds / 8, self._end_stalled)
        try:
            return await message
        except asyncio.CancelledError:
            # Ours, and no other cancel of the call pending (its client gone): the bound passed.
            if task in self._ended and task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            del self._reading[task]
            self._ended.discard(task)

    def _end_stalled(self) -> None:
        now = time.monotonic()
        for task, began in self._reading.items():
            if now - began >= self.seconds and task not in self._ended:
                self._ended.add(task)
                task.cancel()  # delivered at the task's await of its message: after this loop
        self._sweep = (
            asyncio.get_running_loop().call_later(self.seconds / 8, self._end_stalled) if self._reading else None
        )


def make(parts: Parts) -> Read:
    return Read(parts.read_seconds)
