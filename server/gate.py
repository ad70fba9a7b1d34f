"""The one path of every offsetstore.v1 call: authenticated, admitted, read, authorised, run, its errors mapped.

Each RPC is served as a client-streaming handler of raw bytes, so that the server decides
what it can from the call's metadata before a byte of the request is read::

    metadata   -> authenticate (token, client certificate)      UNAUTHENTICATED
               -> count the principal's calls in                 RESOURCE_EXHAUSTED (+ RetryInfo)
               -> a grant that could allow the method at all     PERMISSION_DENIED
    request    -> read it (within READ_SECONDS)                  DEADLINE_EXCEEDED
               -> count its partitions on the wire, decode it   INVALID_ARGUMENT (> 10,000 in a field: undecoded)
               -> authorise it against the grants               PERMISSION_DENIED
               -> the group quota                               RESOURCE_EXHAUSTED (GROUP_QUOTA)
               -> the partition quota                           RESOURCE_EXHAUSTED (PARTITION_QUOTA)
               -> weigh an aggregating read by what it scans     (scan_cost.py: a bounded count)
               -> wait for the principal's cost share           (queued, as a coroutine)
               -> the servicer, under the caller's deadline     whatever it raises
    response   -> charge its bytes to the principal

A caller that never sends its request costs a coroutine, no thread and no share of anyone
else's. Every error of a call ends here, turned into its status by
:func:`offsetstore.server.status.fail` (a typed error its rich status, anything unexpected
a bare INTERNAL), with a log line (the traceback, for the unexpected). Once a call ends,
the gate tells its observers (the metrics) one :class:`CallOutcome`: the method, the
request if it was read, the status code and the typed error, so that a quota refusal, a
call-limit refusal and a stale generation are told apart by their reason, not guessed
back from a status code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import grpc
from google.protobuf.message import DecodeError, Message

from offsetstore.core.calls import FACTS, CallFacts
from offsetstore.core.errors import DeadlineExceededError, InvalidArgumentError, OffsetStoreError
from offsetstore.runtime.store import deadline
from offsetstore.server.admission import Admission, cost_of
from offsetstore.server.auth import AccessControl, Principal, current_principal
from offsetstore.server.call import Call
from offsetstore.server.partition_quota import PartitionQuota
from offsetstore.server.quota import GroupQuota
from offsetstore.server.scan_cost import ScanCost
from offsetstore.server.servicer import OffsetStoreServicer
from offsetstore.server.status import fail
from offsetstore.server.wire import check_entries
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = ["READ_SECONDS", "CallObserver", "CallOutcome", "Gate", "peer_address"]

log = logging.getLogger(__name__)

#: How long a call may take to send its request once it has begun: a stalled request is
#: dropped, so that no one can hold calls open forever by never finishing one.
READ_SECONDS = 30.0


@dataclass(frozen=True)
class CallOutcome:
    """What one offsetstore.v1 call came to, told to the gate's observers when it ends."""

    #: The method's facts (:mod:`offsetstore.core.calls`): what an observer needs of the call, never its name.
    facts: CallFacts
    #: The decoded request; None for a call refused (or failed) before it was read.
    request: Any
    code: grpc.StatusCode
    #: The typed error the call ended with; None for a success, a crash (INTERNAL) or a cancel.
    error: OffsetStoreError | None = None
    #: Who made the call: the authenticated principal, or the peer's address without authentication.
    principal: str | None = None

    @property
    def method(self) -> str:
        return self.facts.method

    @property
    def reason(self) -> str:
        """The ErrorInfo reason ("" for OK); a failure without a typed error is named by its code."""
        if self.error is not None and self.error.reason:
            return self.error.reason
        return "" if self.code == grpc.StatusCode.OK else self.code.name

    @property
    def limit(self) -> str:
        """Which limit refused the call (``principal_calls``, ``max_groups``...; see the errors' metadata), or ""."""
        return self.error.metadata.get("limit", "") if self.error is not None else ""


@runtime_checkable
class CallObserver(Protocol):
    """Told every call's :class:`CallOutcome`, on the event loop, before the response is sent: must not block."""

    def call_ended(self, outcome: CallOutcome) -> None: ...


def peer_address(peer: str) -> str:
    """The address of a gRPC peer without its port (``ipv4:127.0.0.1:5123`` -> ``ipv4:127.0.0.1``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return f"{kind}:{rest.partition(']')[0]}]"
    if kind in ("ipv4", "ipv6"):
        return f"{kind}:{rest.rpartition(':')[0]}"
    return peer  # unix sockets and the like: the whole name


class Gate:
    """Serves ``servicer``'s methods (see the module docstring); :meth:`handler` is what the server registers."""

    def __init__(
        self,
        servicer: OffsetStoreServicer,
        *,
        admission: Admission,
        auth: AccessControl | None = None,
        quota: GroupQuota | None = None,
        partition_quota: PartitionQuota | None = None,
        scan_cost: ScanCost | None = None,
        read_seconds: float = READ_SECONDS,
        observers: Sequence[CallObserver] = (),
    ) -> None:
        self.servicer = servicer
        self.observers = tuple(observers)
        self.service = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]
        self.admission = admission
        self.auth = auth
        self.quota = quota
        self.partition_quota = partition_quota
        self.scan_cost = scan_cost
        self.read_seconds = read_seconds
        self._reads = _ReadBound(read_seconds)

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler of every method of the service."""
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method in self.service.methods:
            request_class = getattr(pb, method.input_type.name)
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(
                self._serve(FACTS[method.name], request_class, getattr(self.servicer, method.name)),
                # None: the call failed (see status.fail()); nothing is sent but its status.
                response_serializer=lambda response: b"" if response is None else response.SerializeToString(),
            )
        return grpc.method_handlers_generic_handler(self.service.full_name, handlers)

    def _serve(
        self, facts: CallFacts, request_class: type[Message], run: Callable[[Any, Any], Awaitable[Message]]
    ) -> Callable[[AsyncIterator[bytes], grpc.aio.ServicerContext[Any, Any]], Awaitable[Message | None]]:
        method = facts.method

        async def serve(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]) -> Message | None:
            started = time.perf_counter()
            name: str | None = None
            principal: Principal | None = None
            request: Any = None
            size = 0
            outcome: CallOutcome | None = None
            try:
                principal = self.auth.authenticate(context) if self.auth is not None else None
                name = principal.name if principal is not None else peer_address(context.peer())
                try:
                    self.admission.enter(name, limited=principal is not None)
                except OffsetStoreError:
                    name = None  # not counted in: nothing to count out
                    raise
                if principal is not None:
                    assert self.auth is not None
                    self.auth.authorize_method(principal, facts)  # before a byte of the request is read
                request, carried = await self._read(requests, request_class, method)
                # The call, bound once: every policy below takes it whole.
                call = Call(facts, request, principal.name if principal is not None else None, carried)
                if principal is not None:
                    assert self.auth is not None
                    self.auth.authorize(principal, call)
                    if self.quota is not None:
                        await self.quota.check(call)
                    if self.partition_quota is not None:
                        await self.partition_quota.check(call)
                cost = cost_of(call)
                if self.scan_cost is not None:  # a one-row page that aggregates a huge group is not one row
                    cost = max(cost, await self.scan_cost.of(call))
                await self.admission.run(name, cost)
                token = current_principal.set(principal.name if principal is not None else None)
                try:
                    remaining = context.time_remaining()
                    bound = remaining if remaining is not None and remaining < 1e9 else None
                    with deadline(bound, _active(context), principal=name):  # name: its share of the batches
                        response = await run(request, context)
                finally:
                    self.admission.done(name, cost)
                    current_principal.reset(token)
                if self.quota is not None:
                    self.quota.after(call, response)
                if self.partition_quota is not None:
                    self.partition_quota.after(call)
                if principal is not None and self.admission.rate > 0:
                    size = response.ByteSize()
                log.debug("rpc", extra=_fields(method, request, "OK", started, name))
                outcome = CallOutcome(facts, request, grpc.StatusCode.OK, principal=name)
                return response
            except OffsetStoreError as error:
                log.info(
                    "rpc refused" if request is None else "rpc failed",
                    extra={**_fields(method, request, error.code.name, started, name), "reason": error.reason},
                )
                outcome = CallOutcome(facts, request, error.code, error, name)
                fail(context, error)
                return None
            except asyncio.CancelledError:
                outcome = CallOutcome(facts, request, grpc.StatusCode.CANCELLED, principal=name)
                raise
            except Exception as error:
                # The traceback goes to the log, never to the client.
                log.exception("rpc crashed", extra=_fields(method, request, "INTERNAL", started, name))
                outcome = CallOutcome(facts, request, grpc.StatusCode.INTERNAL, principal=name)
                fail(context, error)
                return None
            finally:
                if name is not None:
                    self.admission.leave(name, size, limited=principal is not None)
                if outcome is not None:
                    self._tell(outcome)

        return serve

    def _tell(self, outcome: CallOutcome) -> None:
        for observer in self.observers:
            try:
                observer.call_ended(outcome)
            except Exception:  # an observer's bug must not change the call's answer
                log.exception("a call observer failed", extra={"rpc": outcome.method})

    async def _read(
        self, requests: AsyncIterator[bytes], request_class: type[Message], method: str
    ) -> tuple[Message, int]:
        """The decoded request and the partitions it carries (:func:`offsetstore.server.wire.check_entries`)."""
        try:
            data = await self._reads.first(requests)
        except StopAsyncIteration:
            raise InvalidArgumentError(f"the call carries no {method} request message") from None
        except TimeoutError:
            raise DeadlineExceededError(
                f"the {method} request did not arrive within {self.read_seconds:g} s of the call's start"
            ) from None
        # Counted before it is decoded, every costly field: 20 million empty entries decode into gigabytes.
        carried = check_entries(request_class.DESCRIPTOR, data, method)  # type: ignore[arg-type]  # upb's Descriptor, the same API
        try:
            return request_class.FromString(data), carried
        except (DecodeError, RuntimeError, ValueError):
            raise InvalidArgumentError(f"the request does not decode as a {method} request message") from None


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
        self._reading: dict[asyncio.Task[Any], float] = {}  # the task reading -> when it began
        self._ended: set[asyncio.Task[Any]] = set()  # cancelled by a sweep, not yet told
        self._sweep: asyncio.TimerHandle | None = None

    async def first(self, requests: AsyncIterator[bytes]) -> bytes:
        """The call's first message (StopAsyncIteration if none); TimeoutError past the bound."""
        task = asyncio.current_task()
        assert task is not None
        self._reading[task] = time.monotonic()
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.seconds / 8, self._end_stalled)
        try:
            return await anext(requests)
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


def _active(context: grpc.aio.ServicerContext[Any, Any]) -> Callable[[], bool]:
    return lambda: not (context.cancelled() or context.done())


def _fields(method: str, request: Any, outcome: str, started: float, principal: str | None) -> dict[str, Any]:
    return {
        "rpc": method,
        "group": getattr(request, "group_id", "") if request is not None else "",
        "outcome": outcome,
        "principal": principal,
        "ms": round((time.perf_counter() - started) * 1000, 2),
    }
