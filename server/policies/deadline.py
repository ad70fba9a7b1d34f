"""The caller's deadline over what the call does in the store, and its principal as the actor of what it writes."""

from __future__ import annotations

from google.protobuf.message import Message

from offsetstore.runtime.store import deadline
from offsetstore.server.auth import current_principal
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next

__all__ = ["Deadline", "make"]

# grpc reports "no deadline" as a huge number of seconds.
_NO_DEADLINE = 1e9


class Deadline:
    """Runs the rest under the caller's deadline (a store call past it ends DEADLINE_EXCEEDED) and while it is there."""

    async def __call__(self, call: Call, next: Next) -> Message:
        transport = call.transport
        remaining = transport.time_remaining() if transport is not None else None
        bound = remaining if remaining is not None and remaining < _NO_DEADLINE else None
        token = current_principal.set(call.principal)
        try:
            # caller: its share of the group commit's batches.
            with deadline(bound, transport.active if transport is not None else _always, principal=call.caller):
                return await next(call)
        finally:
            current_principal.reset(token)


def _always() -> bool:
    return True


def make(parts: Parts) -> Deadline:
    return Deadline()
