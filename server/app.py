"""Assembles and runs the gRPC server: servicer, health, reflection, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as grpc_reflection

from offsetstore.core.errors import OffsetStoreError, ResourceExhaustedError
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server.admission import Admission
from offsetstore.server.auth import AccessControl
from offsetstore.server.auth.callers import CallerContext
from offsetstore.server.gate import Gate
from offsetstore.server.grpc_connections import PeerCap, descriptor_limit, server_options, total_connections
from offsetstore.server.http import HttpConfig, HttpListener
from offsetstore.server.interceptor import Behaviour, HandlerInterceptor, PolicyInterceptor
from offsetstore.server.limits import Limits
from offsetstore.server.servicer import OffsetStoreServicer
from offsetstore.server.status import CallEnded, fail
from offsetstore.server.tracing import server_interceptors as tracing_interceptors
from offsetstore.v1 import offset_store_pb2 as pb

log = logging.getLogger(__name__)


SERVICE_NAME = pb.DESCRIPTOR.services_by_name["OffsetStoreService"].full_name
_HEALTH_WATCH = "/grpc.health.v1.Health/Watch"

# Responses are pages: <= 1000 items, or --max-response-bytes (at most this) of a group's offsets.
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024
#: Calls open at once, waiting ones included; each costs a coroutine and its buffers.
MAX_CONCURRENT_CALLS = 10_000
#: A server made without limits of its own: the defaults (32 workers' worth).
DEFAULT_LIMITS = Limits()

# Connections, whoever holds them, do not live forever: an idle one is closed after 5
# minutes, every one after 30 (with 30 s for its calls to finish; clients reconnect by
# themselves), and a peer that stops answering keepalive pings is dropped.
CONNECTION_OPTIONS = (
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.max_connection_idle_ms", 300_000),
    ("grpc.max_connection_age_ms", 1_800_000),
    ("grpc.max_connection_age_grace_ms", 30_000),
)


class StreamGuard(HandlerInterceptor):
    """Bounds server reflection's streams in number and in time, and may require a known caller.

    A stream costs a coroutine, but a client may keep any number open and idle: beyond
    ``limit`` open streams a new one is RESOURCE_EXHAUSTED at once, and each is ended
    (CANCELLED) after ``seconds``. With ``authenticate`` (``--reflection authenticated``), a
    stream needs a caller it accepts. Health's Watch, which streams by design, is left alone.
    """

    def __init__(
        self,
        limit: int,
        seconds: float,
        authenticate: Callable[[CallerContext], object] | None = None,
    ) -> None:
        self.limit = limit
        self.seconds = seconds
        self.authenticate = authenticate
        self._open = 0

    def wrap(
        self, method: str, kind: str, handler: grpc.RpcMethodHandler[Any, Any], behaviour: Behaviour
    ) -> Behaviour | None:
        if kind != "bidi_stream" or method == _HEALTH_WATCH:
            return None  # the offset store's methods and health's are not streams that idle
        return self._guard(behaviour)

    def _guard(self, behaviour: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def stream(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            try:
                if self.authenticate is not None:
                    self.authenticate(context)
                if self._open >= self.limit:
                    raise ResourceExhaustedError(
                        f"the server serves at most {self.limit} streams at once; retry later",
                        retry_after=1.0,
                        metadata={"limit": "streams"},
                    )
            except OffsetStoreError as error:
                fail(context, error)
                return
            self._open += 1
            try:
                async with asyncio.timeout(self.seconds):
                    async for response in behaviour(requests, context):
                        yield response
            except TimeoutError:
                fail(context, CallEnded(grpc.StatusCode.CANCELLED, f"a stream ends after {self.seconds:g} s"))
            finally:
                self._open -= 1

        return stream


class HealthWatcher:
    """Keeps grpc.health.v1 at SERVING exactly while the database answers; a task on the server's loop."""

    def __init__(self, store: AsyncStore, servicer: health_aio.HealthServicer, interval: float = 1.0) -> None:
        self.store = store
        self.servicer = servicer
        self.interval = interval
        self._serving: bool | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.check()
        self._task = asyncio.create_task(self._loop(), name="offsetstore-health")

    async def check(self) -> bool:
        try:
            serving = await self.store.ping()
        except Exception:
            # Whatever went wrong, the database did not answer; the watcher must live on to see it return.
            log.exception("health check failed")
            serving = False
        if serving != self._serving:
            status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            for name in ("", SERVICE_NAME):
                await self.servicer.set(name, status)
            log.info("health changed", extra={"outcome": "SERVING" if serving else "NOT_SERVING"})
            self._serving = serving
        return serving

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.servicer.enter_graceful_shutdown()


class OffsetStoreServer:
    """A gRPC server (grpc.aio) over ``store``, on the event loop of whoever runs it.

    grpc's asyncio examples are the model: made from plain parts, then ``async with
    OffsetStoreServer(store, listen) as server:`` (or :meth:`start` and :meth:`stop`) inside
    the loop that runs ``store``. ``listen`` may use port 0 (:attr:`port` is known once
    started). Calls await ``store`` (its pools, group commit, timeouts and metric hooks);
    stopping the server leaves the store open (its owner closes it).

    Its parts are composed from what it is given: ``limits`` make the gate's admission, the
    quotas and the reflection guard (this process's :meth:`~Limits.share` of them); ``http``, when
    given, an HTTP listener beside gRPC on the same gate; ``auth``, an
    :class:`~offsetstore.server.auth.AccessControl`, authenticates and authorises every call;
    ``credentials`` serve TLS; ``interceptors`` (``grpc.aio`` interceptors) see every gRPC call,
    also those refused; those that are policies too (:class:`~offsetstore.server.interceptor.PolicyInterceptor`:
    the metrics, the traces) are the outermost of the gate's chain, and so see every offset store
    call, gRPC and HTTP, once. ``reuse_port`` lets several processes listen on one port
    (``serve --processes``).
    """

    def __init__(
        self,
        store: AsyncStore,
        listen: str = "127.0.0.1:0",
        *,
        limits: Limits = DEFAULT_LIMITS,
        http: HttpConfig | None = None,
        interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
        auth: AccessControl | None = None,
        credentials: grpc.ServerCredentials | None = None,
        health_interval: float = 1.0,
        reuse_port: bool = False,
    ) -> None:
        if limits.reflection == "authenticated" and auth is None:
            raise ValueError("reflection 'authenticated' needs authentication: a tokens file or client certificates")
        self.store = store
        self.listen = listen
        self.credentials = credentials
        self.limits = limits.share()
        self.auth = auth
        self.health_interval = health_interval
        self.http_config = http
        self.http: HttpListener | None = None
        self.reuse_port = reuse_port
        # A peer's connections beyond its cap, closed (grpc core caps only the total, and at accept).
        self.peer_cap = PeerCap(self.limits.max_connections_per_peer)
        # OTEL_*: a span of every call (server/tracing.py), innermost, and a gate observer naming its principal and group.
        self.interceptors = (*interceptors, *tracing_interceptors())
        #: The port listened on, once started (``listen``'s, or the one the kernel chose for port 0).
        self.port = 0
        self.host = listen.rpartition(":")[0].strip("[]")
        self._started = self._stopped = False

    def _gate(self) -> Gate:
        limits = self.limits
        return Gate(
            OffsetStoreServicer(self.store),
            store=self.store,
            admission=Admission(
                max_calls=limits.calls_per_principal,
                # What the sync server queued at most, server-wide; now per anonymous peer.
                max_anonymous_calls=limits.max_workers * 8,
                cost_per_second=limits.principal_partitions_per_second,
                bytes_per_second=limits.principal_bytes_per_second,
            ),
            limits=limits,
            auth=self.auth,
            # The interceptors that are policies too (metrics, traces): the gate runs them for its calls.
            observers=tuple(i for i in self.interceptors if isinstance(i, PolicyInterceptor)),
        )

    def _bind(self) -> int:
        limits = self.limits
        gate = self._gate()
        streams = StreamGuard(
            limits.streams,
            limits.stream_seconds,
            self.auth.authenticate if self.auth is not None and limits.reflection == "authenticated" else None,
        )
        self.server = grpc.aio.server(
            interceptors=(*self.interceptors, streams),
            options=[
                ("grpc.max_receive_message_length", limits.max_message_bytes),
                ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
                ("grpc.so_reuseport", 1 if self.reuse_port else 0),
                *CONNECTION_OPTIONS,
                *server_options(
                    limits.grpc_handshake_timeout,
                    limits.max_connections or total_connections(descriptor_limit()),
                ),
            ],
            # A waiting call is a coroutine: no bound of threads; this one only bounds memory.
            maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
        )
        self.server.add_generic_rpc_handlers((gate.handler(),))
        if self.http_config is not None:  # the HTTP listener calls the same gate's chain
            self.http = HttpListener(
                gate.run,
                self.http_config,
                max_message_bytes=limits.max_message_bytes,
                reuse_port=self.reuse_port,
            )
        self.health_servicer = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health_servicer, self.server)
        if limits.reflection != "off":
            grpc_reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME), self.server
            )
        self.health = HealthWatcher(self.store, self.health_servicer, self.health_interval)
        if self.credentials is None:
            return self.server.add_insecure_port(self.listen)
        return self.server.add_secure_port(self.listen, self.credentials)

    @property
    def address(self) -> str:
        """A target clients can dial."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> OffsetStoreServer:
        """Binds ``listen`` and serves; ``OSError`` (or grpc's ``RuntimeError``) when it cannot listen there."""
        try:
            self.port = self._bind()
            if self.port == 0:
                raise OSError(f"cannot listen on {self.listen}")
            await self.health.start()
            await self.server.start()
            self.peer_cap.start(self.port)
            if self.http is not None:
                await self.http.start()
        except BaseException:
            await self.peer_cap.stop()
            if hasattr(self, "server"):
                await self.server.stop(None)
            if hasattr(self, "health"):
                await self.health.stop()
            raise
        self._started = True
        return self

    async def stop(self, grace: float | None = 0) -> None:
        """Refuses new calls, lets in-flight ones finish within ``grace`` seconds, then stops."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        await self.peer_cap.stop()
        await self.health.stop()
        if self.http is not None:
            await self.http.stop(grace)
        await self.server.stop(grace)

    async def __aenter__(self) -> OffsetStoreServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
