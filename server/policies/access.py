"""Who calls, and whether their grants allow it: the method's from the metadata, the request's once it is read."""

from __future__ import annotations

from google.protobuf.message import Message

from offsetstore.server.auth import AccessControl
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next

__all__ = [
    "Identified",
    "MethodGranted",
    "RequestGranted",
    "granted_method",
    "granted_request",
    "identified",
    "peer_address",
]


def peer_address(peer: str) -> str:
    """The address of a gRPC peer without its port (``ipv4:127.0.0.1:5123`` -> ``ipv4:127.0.0.1``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return f"{kind}:{rest.partition(']')[0]}]"
    if kind in ("ipv4", "ipv6"):
        return f"{kind}:{rest.rpartition(':')[0]}"
    return peer  # unix sockets and the like: the whole name


class Identified:
    """Names the caller: its principal (UNAUTHENTICATED without a valid one) or, with authentication off, its address."""

    def __init__(self, auth: AccessControl | None) -> None:
        self.auth = auth

    async def __call__(self, call: Call, next: Next) -> Message:
        transport = call.transport
        if self.auth is None:
            call.caller = peer_address(transport.peer()) if transport is not None else ""
        elif transport is not None:
            principal = self.auth.authenticate(transport)
            call.identity = principal
            call.principal = call.caller = principal.name
        return await next(call)


class MethodGranted:
    """PERMISSION_DENIED before a byte of the request is read, unless some grant could allow the method at all."""

    def __init__(self, auth: AccessControl) -> None:
        self.auth = auth

    async def __call__(self, call: Call, next: Next) -> Message:
        if call.identity is not None:
            self.auth.authorize_method(call.identity, call.facts)
        return await next(call)


class RequestGranted:
    """PERMISSION_DENIED unless the caller's grants cover what the request names (its group, prefix or topics)."""

    def __init__(self, auth: AccessControl) -> None:
        self.auth = auth

    async def __call__(self, call: Call, next: Next) -> Message:
        if call.identity is not None:
            self.auth.authorize(call.identity, call)
        return await next(call)


def identified(parts: Parts) -> Identified:
    return Identified(parts.auth)


def granted_method(parts: Parts) -> MethodGranted | None:
    return None if parts.auth is None else MethodGranted(parts.auth)


def granted_request(parts: Parts) -> RequestGranted | None:
    return None if parts.auth is None else RequestGranted(parts.auth)
