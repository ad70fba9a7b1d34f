"""The one path of every offsetstore.v1 call: a chain of policies around the servicer, and its gRPC adapter.

Each RPC is served as a client-streaming handler of raw bytes, so that the server decides
what it can from the call's metadata before a byte of the request is read. The chain, in
:data:`ORDER` (outermost first), each a policy (:mod:`offsetstore.server.policy`)::

    the server's observers   metrics, then traces (its interceptors that are policies)
    log                      a line per call
    authenticate             token, client certificate                 UNAUTHENTICATED
    count the call in        the caller's calls and bytes               RESOURCE_EXHAUSTED (+ RetryInfo)
    the method's grant       a grant that could allow it at all         PERMISSION_DENIED
    read the request         within READ_SECONDS, counted, decoded      DEADLINE_EXCEEDED, INVALID_ARGUMENT
    the request's grant      its group, prefix or topics                PERMISSION_DENIED
    group quota                                                         RESOURCE_EXHAUSTED (GROUP_QUOTA)
    partition quota                                                     RESOURCE_EXHAUSTED (PARTITION_QUOTA)
    scan cost                what an aggregating read scans             (a bounded count)
    cost share               wait for the caller's share                (queued, as a coroutine)
    deadline                 the caller's deadline, its actor
    the servicer                                                        whatever it raises

A caller that never sends its request costs a coroutine, no thread and no share of anyone
else's. Every error of a call leaves the chain at its transport's adapter, which turns it
into its status in one place (gRPC: :func:`offsetstore.server.status.fail`; HTTP:
:mod:`offsetstore.server.http.connect`): a typed error its rich status, anything unexpected
a bare INTERNAL (the log policy logged its traceback). Adding a policy is a module and a
line in :data:`ORDER`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence

import grpc
from google.protobuf.message import Message

from offsetstore.core.calls import FACTS, SERVICE, CallFacts
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server import partition_quota, quota, scan_cost
from offsetstore.server.admission import Admission
from offsetstore.server.auth import AccessControl
from offsetstore.server.call import Call, Metadata
from offsetstore.server.limits import Limits
from offsetstore.server.policies import access, deadline, log, read
from offsetstore.server.policies import admission as fair
from offsetstore.server.policies.access import peer_address
from offsetstore.server.policies.parts import Make, Parts
from offsetstore.server.policy import Next, Policy, chain
from offsetstore.server.servicer import OffsetStoreServicer
from offsetstore.server.status import fail

__all__ = ["ORDER", "READ_SECONDS", "Gate", "peer_address"]

#: How long a call may take to send its request once it has begun: a stalled request is
#: dropped, so that no one can hold calls open forever by never finishing one.
READ_SECONDS = 30.0


def _observers(parts: Parts) -> Sequence[Policy]:
    return parts.observers


#: The gate, outermost first: each entry makes its policy from the server's parts (see the module docstring).
ORDER: tuple[Make, ...] = (
    _observers,
    log.make,
    access.identified,
    fair.counted_in,
    access.granted_method,
    read.make,
    access.granted_request,
    quota.make,
    partition_quota.make,
    scan_cost.make,
    fair.shared,
    deadline.make,
)


def policies(parts: Parts, order: Iterable[Make]) -> tuple[Policy, ...]:
    """The policies ``order`` makes of ``parts``, those not configured left out."""
    made: list[Policy] = []
    for make in order:
        found = make(parts)
        if found is None:
            continue
        if isinstance(found, Sequence):
            made.extend(found)
        else:
            made.append(found)
    return tuple(made)


class Gate:
    """Serves ``servicer``'s methods through the chain :data:`ORDER` makes of the server's parts.

    :attr:`run` is the chain, which an HTTP adapter calls; :meth:`handler` is what the gRPC
    server registers.
    """

    def __init__(
        self,
        servicer: OffsetStoreServicer,
        *,
        store: AsyncStore,
        admission: Admission,
        limits: Limits,
        auth: AccessControl | None = None,
        observers: Sequence[Policy] = (),
        read_seconds: float = READ_SECONDS,
    ) -> None:
        self.servicer = servicer
        self.parts = Parts(store, admission, auth, limits, read_seconds, tuple(observers))
        self.policies = policies(self.parts, ORDER)
        self._methods: Mapping[str, Callable[[Message, Call], Awaitable[Message]]] = {
            name: getattr(servicer, name) for name in FACTS
        }
        #: The chain: every policy, then the servicer's method.
        self.run: Next = chain(self.policies, self._serve)
        #: Each method's chain for gRPC: without the policies that say they cannot act on it
        #: (``applies(facts)`` false: the scan cost of a method that never scans), a frame or two less a call.
        self._runs: Mapping[str, Next] = {
            name: chain([p for p in self.policies if _applies(p, facts)], self._serve) for name, facts in FACTS.items()
        }

    async def _serve(self, call: Call) -> Message:
        return await self._methods[call.method](call.message, call)

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler of every method of the service."""
        handlers: dict[str, grpc.RpcMethodHandler[bytes, Message | None]] = {
            name: grpc.stream_unary_rpc_method_handler(self._grpc(facts), response_serializer=_serialized)
            for name, facts in FACTS.items()
        }
        return grpc.method_handlers_generic_handler(SERVICE.full_name, handlers)

    def _grpc(
        self, facts: CallFacts
    ) -> Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext[bytes, Message | None]], Awaitable[Message | None]]:
        run = self._runs[facts.method]

        async def serve(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, Message | None]
        ) -> Message | None:
            try:
                return await run(Call(facts, transport=GrpcCall(requests, context)))
            except Exception as error:
                fail(context, error)  # its status, sent once the handler returns
                return None

        return serve


def _applies(policy: Policy, facts: CallFacts) -> bool:
    applies: Callable[[CallFacts], bool] | None = getattr(policy, "applies", None)
    return applies is None or applies(facts)


def _serialized(response: Message | None) -> bytes:
    # None: the call failed (see status.fail()); nothing is sent but its status.
    return b"" if response is None else response.SerializeToString()


class GrpcCall:
    """The gRPC adapter: one call's context and request stream, as the gate's policies read a transport."""

    __slots__ = ("_context", "_requests")

    def __init__(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, Message | None]
    ) -> None:
        self._requests = requests
        self._context = context

    def invocation_metadata(self) -> Metadata | None:
        return self._context.invocation_metadata()

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        return self._context.auth_context()

    def peer(self) -> str:
        return self._context.peer()

    def time_remaining(self) -> float | None:
        return self._context.time_remaining()

    def active(self) -> bool:
        return not (self._context.cancelled() or self._context.done())

    async def message(self) -> bytes | None:
        try:
            return await anext(self._requests)
        except StopAsyncIteration:
            return None
