"""The shape of the gate's policies, and how a tuple of them becomes one chain around the servicer.

A policy is temporalio's interceptor shape: it takes the call and the rest of the chain,
decides what it decides, and awaits the rest (or raises, and the rest never runs)::

    class Audit:
        async def __call__(self, call: Call, next: Next) -> Message:
            response = await next(call)
            audit.info("%s by %s", call.method, call.principal)
            return response

The chain is composed once, when the server is made (:func:`chain`); a call then costs one
coroutine frame per policy, nothing built per call. A policy that cannot act on some methods
says so with ``applies(facts) -> bool`` (the scan cost: methods that never scan), and the
gate leaves it out of those methods' gRPC chains. What the gate is made of, in which order,
is one tuple (:data:`offsetstore.server.gate.ORDER`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from google.protobuf.message import Message

from offsetstore.server.call import Call

__all__ = ["Next", "Policy", "chain"]

#: The rest of the chain after a policy: the next policies, then the servicer.
Next = Callable[[Call], Awaitable[Message]]


class Policy(Protocol):
    """One step of every offsetstore.v1 call (see the module docstring)."""

    async def __call__(self, call: Call, next: Next) -> Message: ...


def chain(policies: Iterable[Policy], last: Next) -> Next:
    """``policies`` (outermost first) around ``last``: the one function a transport adapter calls."""
    run = last
    for policy in reversed(tuple(policies)):
        run = _link(policy, run)
    return run


def _link(policy: Policy, rest: Next) -> Next:
    # A plain function that returns the policy's coroutine: the policy's is the only frame
    # its step adds to a call (an ``async def`` here would add another to every await).
    run = policy.__call__

    def step(call: Call) -> Awaitable[Message]:
        return run(call, rest)

    return step
