"""Fair admission as two policies (:mod:`offsetstore.server.admission` decides): calls counted in, then the cost share."""

from __future__ import annotations

from google.protobuf.message import Message

from offsetstore.server.admission import Admission, cost_of
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next

__all__ = ["CountedIn", "Shared", "counted_in", "shared"]


class CountedIn:
    """Counts the caller's call in from its metadata (RESOURCE_EXHAUSTED past its calls or bytes), and out with its response's bytes."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def __call__(self, call: Call, next: Next) -> Message:
        name = call.caller
        assert name is not None, "the caller is named first (access.Identified)"
        limited = call.principal is not None
        self.admission.enter(name, limited=limited)  # refused: not counted in, nothing to count out
        size = 0
        try:
            response = await next(call)
            if limited and self.admission.rate > 0:
                size = response.ByteSize()
            return response
        finally:
            self.admission.leave(name, size, limited=limited)


class Shared:
    """Waits for the caller's cost share and budget: the call's cost (:func:`cost_of`), or what its scan reads if more."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def __call__(self, call: Call, next: Next) -> Message:
        name = call.caller
        assert name is not None, "the caller is named first (access.Identified)"
        cost = max(cost_of(call), call.scanned)  # a one-row page that aggregates a huge group is not one row
        await self.admission.run(name, cost)
        try:
            return await next(call)
        finally:
            self.admission.done(name, cost)


def counted_in(parts: Parts) -> CountedIn:
    return CountedIn(parts.admission)


def shared(parts: Parts) -> Shared:
    return Shared(parts.admission)
