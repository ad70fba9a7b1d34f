"""What the gate's policies are made from: one server's configured parts, typed, passed whole."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server.admission import Admission
from offsetstore.server.auth import AccessControl
from offsetstore.server.limits import Limits
from offsetstore.server.policy import Policy

__all__ = ["Make", "Parts"]


@dataclass(frozen=True)
class Parts:
    """One server's parts; each entry of :data:`offsetstore.server.gate.ORDER` makes its policy from them."""

    store: AsyncStore
    #: Shared by the two admission policies (calls counted in, the cost share).
    admission: Admission
    #: None: authentication is off (callers are named by their address).
    auth: AccessControl | None
    limits: Limits
    #: How long a call may take to send its request once it has begun.
    read_seconds: float
    #: The server's interceptors that are policies too (metrics, tracing), outermost first.
    observers: Sequence[Policy] = ()


#: An entry of the gate's order: the policy (or policies) it makes from the server's parts; None when not configured.
Make = Callable[[Parts], Policy | Sequence[Policy] | None]
